# The quickstart is `make demo` and `make test` on a fresh clone: both build .venv first.
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
# One venv per torch, so trying another torch never touches .venv: TORCH_SPEC=torch==2.1.2 uses .venv-torch2.1.
DEFAULT_TORCH_SPEC := torch==2.13.0
VENV ?= $(if $(filter $(DEFAULT_TORCH_SPEC),$(TORCH_SPEC)),.venv,.venv-$(basename $(subst ==,,$(TORCH_SPEC))))
EXTRAS ?= test,plot,msprobe,msprof,tensorboard,hta,orjson
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ascend_tune-installed
DEMO_OUT ?= exp/demo

.PHONY: install demo test test-wheel lint bench clean

install: $(STAMP)

# torch goes in first, pinned, so the package's torch>=2.1 is already satisfied and no CUDA build is pulled; the
# extras then install with that torch pinned (and numpy<2 for a torch before 2.3); an extra that needs a newer
# torch is skipped with a message (tools/install_extras.py).
$(STAMP): setup.cfg setup.py pyproject.toml Makefile tools/install_extras.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) tools/install_extras.py "$(EXTRAS)"
	touch $@

demo: install
	$(VENV)/bin/ascend-tune demo --out $(DEMO_OUT)

lint: install
	$(VENV)/bin/ruff check .

test: install lint
	$(PY) -m pytest -q

# The package as a user installs it: the wheel built from the sdist (tools/build_dist.py), installed (not
# editable) into a fresh venv beside the same torch, and the launcher's and the plugin's tests run against it, with
# nothing of the checkout on the path (pytest, not python -m pytest; tests/conftest.py checks where it came from).
WHEEL_VENV ?= .venv-wheel
test-wheel: install
	rm -rf dist $(WHEEL_VENV)
	$(PY) tools/build_dist.py dist
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(WHEEL_VENV)/bin/python tools/install_extras.py --wheel "$$(ls dist/*.whl)" test
	ASCEND_TUNE_TEST_INSTALLED=1 $(WHEEL_VENV)/bin/pytest -q -p no:cacheprovider tests/test_launch.py \
		tests/test_launch_real.py tests/test_pytest_plugin.py

bench: install
	@set -e; for f in benchmarks/*.py; do echo "== $$f"; $(PY) $$f; done

clean:
	rm -rf $(VENV) $(WHEEL_VENV) build dist *.egg-info exp
