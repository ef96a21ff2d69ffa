# The two commands of the README: `make run` (install + main job) and `make test` (install + tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test bench clean

# torch first, pinned to the CPU build: letting a later package pull torch would fetch CUDA.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/s3 collect

test: install
	$(BIN)/pytest -q

bench: install
	$(BIN)/s3 bench sim --json

clean:
	rm -rf $(VENV) .pytest_cache
