# The quickstart is `make demo` and `make test` on a fresh clone: both build .venv first.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= test,plot,msprobe,msprof,tensorboard
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ascend_tune-installed
DEMO_OUT ?= exp/demo

.PHONY: install demo test lint bench clean

install: $(STAMP)

# torch goes in first, pinned, so the package's torch>=2.1 is already satisfied and no CUDA build is pulled.
$(STAMP): setup.cfg setup.py pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

demo: install
	$(VENV)/bin/ascend-tune demo --out $(DEMO_OUT)

lint: install
	$(VENV)/bin/ruff check .

test: install lint
	$(PY) -m pytest -q

bench: install
	@set -e; for f in benchmarks/*.py; do echo "== $$f"; $(PY) $$f; done

clean:
	rm -rf $(VENV) build *.egg-info exp
