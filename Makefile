# The two commands: `make serve` and `make test`. Both set themselves up.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
# plugins live in an environment of their own, never in Oaken's: their code (a .pth file included) runs only in
# the sandbox (docs/plugins.md); Oaken reads their entry points from its metadata
PLUGINS := .plugins
PLUGINS_STAMP := $(PLUGINS)/.installed

.PHONY: serve test lint bench clean

# oaken_plugin (the plugin author's API) is installed beside Oaken for the type checker and the tests only;
# a plugin installed here by an older Makefile is taken out (its code must never run in Oaken's processes)
$(STAMP): pyproject.toml plugins/oaken-plugin/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]' -e plugins/oaken-plugin
	@$(BIN)/python -m pip uninstall --quiet --yes oaken-calendar 2>/dev/null || true
	@touch $(STAMP)

# the plugins shipped in this repository (plugins/*) are installed as a user's would be, in the plugin environment
$(PLUGINS_STAMP): plugins/oaken-plugin/pyproject.toml plugins/oaken-calendar/pyproject.toml
	@test -x $(PLUGINS)/bin/python || $(PYTHON) -m venv $(PLUGINS)
	$(PLUGINS)/bin/python -m pip install --quiet -e plugins/oaken-plugin -e plugins/oaken-calendar
	@touch $(PLUGINS_STAMP)

serve: $(STAMP) $(PLUGINS_STAMP)
	./bin/system-packages
	$(BIN)/oaken serve

# The Node programs the tests drive as real clients (package.json: the MCP Inspector CLI), from the
# committed package-lock.json. Without npm, nothing is installed and the tests that need them skip.
# (The Inspector declares node >= 22 but its CLI works on node 20: the engine warnings are silenced.)
$(NODE_STAMP): package.json package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --no-audit --no-fund --loglevel=error && touch $@ \
			|| echo "npm ci failed: the MCP Inspector CLI is not installed; tests/test_mcp_inspector.py will skip"; \
	else \
		echo "npm not found: the MCP Inspector CLI is not installed; tests/test_mcp_inspector.py will skip"; \
	fi

test: $(STAMP) $(PLUGINS_STAMP) $(NODE_STAMP)
	./bin/system-packages
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

bench: $(STAMP)
	$(BIN)/python bench/import_mail.py

clean:
	rm -rf $(VENV) $(PLUGINS) var node_modules
