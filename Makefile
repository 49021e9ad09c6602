# The two commands: `make serve` and `make test`. Both set themselves up.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed

.PHONY: serve test lint bench clean

# the plugins shipped in this repository (plugins/*) are installed as a user's would be
$(STAMP): pyproject.toml plugins/oaken-calendar/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet -e plugins/oaken-calendar
	@touch $(STAMP)

serve: $(STAMP)
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

test: $(STAMP) $(NODE_STAMP)
	./bin/system-packages
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

bench: $(STAMP)
	$(BIN)/python bench/import_mail.py

clean:
	rm -rf $(VENV) var node_modules
