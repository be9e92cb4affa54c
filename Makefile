# `make demo` and `make test` set everything up themselves in .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO_OUT ?= output

.PHONY: install test lint demo bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -p no:cacheprovider

demo: $(STAMP)
	$(VENV)/bin/gym-launch validate examples/node.toml
	$(VENV)/bin/gym-launch plan examples/three-node.toml
	$(VENV)/bin/gym-launch local examples/demo.toml --output-root $(DEMO_OUT)

bench: $(STAMP)
	$(PY) -m bench.coordination

clean:
	rm -rf $(VENV) $(DEMO_OUT) .pytest_cache
