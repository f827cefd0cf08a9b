# phasegate: `make demo` runs the demo on the embedded dev server; `make test` runs the
# type checker and the tests (`make test-unit`: the tests that need no server).
# Both create .venv and install everything first (idempotent; a stamp file skips reinstalls).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-unit typecheck bench lint install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

test: typecheck
	$(BIN)/pytest -q -p no:cacheprovider

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
	rm -rf $(VENV) .phasegate .pytest_cache
