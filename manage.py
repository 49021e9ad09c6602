#!/usr/bin/env python
"""Django's manage.py, the same as the `oaken` command."""

from config.cli import main

if __name__ == "__main__":
    main()
