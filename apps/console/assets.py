"""The console's own files under an address that names their content (/assets/<version>/<path>).

A browser keeps such a file for good (it is immutable at that address) and asks for none of them again on the
next page: a page's shell is then the only request before its first operation call. The version is a digest of
every file under the project's static folder, read once per process, so any change to any of them (a script
module and the modules it imports by relative address alike) moves every address at once. An address naming
another version (a page rendered before a deploy) still gets the current file, revalidated each time.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from django.conf import settings

PREFIX = "/assets/"


@functools.cache
def version() -> str:
    digest = hashlib.sha256()
    root = Path(settings.STATICFILES_DIRS[0])
    for path in sorted(root.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def asset_url(path: str) -> str:
    return f"{PREFIX}{version()}/{path}"
