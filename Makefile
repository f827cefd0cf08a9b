# phasegate: `make demo` runs the demo on the embedded dev server; `make test` runs the
# type checker and the tests, on every core and one more (`make test-unit`: the tests that
# need no server).
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

# The type checker runs beside the tests (it keeps one core busy for a minute, while the
# tests mostly wait on their servers): its output goes to $(TYPECHECK_LOG), shown and failing
# the target when it found errors, so pytest's summary stays the last line of a clean run.
TYPECHECK_LOG := $(VENV)/typecheck.log
# One test process more than there are cores: the tests mostly wait on their servers
# (on 2 cores, 3 processes took the suite from 8 min 6 s to 5 min 51 s).
# The cores this process may use (a container's cpuset included); 2 where that is unknown.
TEST_PROCESSES ?= $(shell $(PYTHON) -c 'import os; print(len(os.sched_getaffinity(0)) + 1)' 2>/dev/null || echo 2)

test: $(STAMP)
	@$(MAKE) --no-print-directory typecheck > $(TYPECHECK_LOG) 2>&1 & typecheck=$$!; \
	{ test -e $(TOOLS_STAMP) || $(MAKE) --no-print-directory $(TOOLS_STAMP); } && \
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_PROCESSES) --dist worksteal; tests=$$?; \
	if ! wait $$typecheck; then cat $(TYPECHECK_LOG); echo "make test: typecheck failed"; exit 1; fi; \
	exit $$tests

test-unit: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider tests/unit

# The repository root is the `phasegate` package: mypy reads it through a link.
# One cache for both runs: bench/ imports the package, which the second run then reads
# from the first's cache instead of checking it (and its dependencies) again.
MYPY_CACHE := $(CURDIR)/$(VENV)/typecheck/.mypy_cache

typecheck: $(STAMP)
	mkdir -p $(VENV)/typecheck && ln -sfn "$(CURDIR)" $(VENV)/typecheck/phasegate
	cd $(VENV)/typecheck && ../bin/mypy --config-file "$(CURDIR)/pyproject.toml" \
		--cache-dir "$(MYPY_CACHE)" -p phasegate
	cd bench && MYPYPATH=../$(VENV)/typecheck:. ../$(BIN)/mypy \
		--config-file ../pyproject.toml --cache-dir "$(MYPY_CACHE)" --explicit-package-bases *.py

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) $(TOOLS) .phasegate .pytest_cache
