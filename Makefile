# phasegate: `make demo` runs the demo on the embedded dev server; `make test` runs the
# type checker and the tests, on every core (`make test-unit`: the tests that need no server).
# Both create .venv and install everything first (idempotent; a stamp file skips reinstalls).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The real coding-agent CLIs the tests drive against the loopback provider fakes
# (tests/test_real_agents.py), pinned, from npm into .tools/ (never at test time).
TOOLS  := .tools
CLAUDE_CODE_VERSION := 2.1.332
CODEX_VERSION       := 0.169.0
TOOLS_STAMP := $(TOOLS)/.installed-$(CLAUDE_CODE_VERSION)-$(CODEX_VERSION)

.PHONY: demo test test-unit typecheck bench lint install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(TOOLS_STAMP):
	mkdir -p $(TOOLS)
	npm install --prefix $(TOOLS) --no-audit --no-fund --no-save --loglevel=error \
		@anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION) @openai/codex@$(CODEX_VERSION)
	$(TOOLS)/node_modules/.bin/claude --version || \
		node $(TOOLS)/node_modules/@anthropic-ai/claude-code/install.cjs
	$(TOOLS)/node_modules/.bin/claude --version && $(TOOLS)/node_modules/.bin/codex --version
	touch $@

install: $(STAMP) $(TOOLS_STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

test: typecheck $(TOOLS_STAMP)
	$(BIN)/pytest -q -p no:cacheprovider -n auto --dist worksteal

test-unit: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider tests/unit

# The repository root is the `phasegate` package: mypy reads it through a link.
typecheck: $(STAMP)
	mkdir -p $(VENV)/typecheck && ln -sfn "$(CURDIR)" $(VENV)/typecheck/phasegate
	cd $(VENV)/typecheck && ../bin/mypy --config-file "$(CURDIR)/pyproject.toml" -p phasegate
	cd bench && MYPYPATH=../$(VENV)/typecheck:. ../$(BIN)/mypy \
		--config-file ../pyproject.toml --explicit-package-bases *.py

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) $(TOOLS) .phasegate .pytest_cache
