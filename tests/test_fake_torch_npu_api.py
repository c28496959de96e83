"""The fake torch_npu has the real package's signatures, for the torch-npu release it presents on this torch.

``tests/data/torch_npu_api.json`` is the real API, read from the torch-npu wheels' sources by
``tools/torch_npu_api.py`` (with ``ast``; the wheels are never installed or imported). On torch 2.1 the fake is
torch-npu 2.1.0.post8; from torch 2.3 on it is ``X.Y.0``, checked against the newest release's API (2.14.0).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys

import pytest
import torch

from ascend_tune.testing.fakes import fakes_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "torch_npu_api.json")
TOOL = os.path.join(ROOT, "tools", "torch_npu_api.py")
UNRESOLVED = "<source>"
_TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
OLD = _TORCH < (2, 3)


def _data() -> dict:
    with open(DATA, encoding="utf-8") as fh:
        return json.load(fh)


def _release_api() -> tuple[str, dict]:
    data = _data()
    version = "2.1.0.post8" if OLD else "2.14.0"
    return version, data[version]


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.syspath_prepend(fakes_dir())
    for name in ("ASCEND_TUNE_FAKE_NPU_FAIL", "ASCEND_TUNE_FAKE_NPU_COUNT"):
        monkeypatch.delenv(name, raising=False)
    _drop()
    yield importlib.import_module("torch_npu")
    _drop()


def _drop() -> None:
    for name in [n for n in sys.modules if n == "torch_npu" or n.startswith("torch_npu.")]:
        del sys.modules[name]


def _public(module: str) -> bool:
    return not any(part.startswith("_") for part in module.split("."))


def _params(obj: object, drop_first: bool) -> list:
    params = list(inspect.signature(obj).parameters.values())
    if drop_first:
        params = params[1:]
    out = []
    for p in params:
        entry = {"name": p.name, "kind": p.kind.name}
        if p.default is not inspect.Parameter.empty:
            entry["default"] = json.loads(json.dumps(p.default, default=repr))  # tuples as the data's lists
        out.append(entry)
    return out


def _same(fake: list, real: list) -> bool:
    if [(p["name"], p["kind"], "default" in p) for p in fake] != [(p["name"], p["kind"], "default" in p) for p in real]:
        return False
    for f, r in zip(fake, real):
        if "default" in r and not (isinstance(r["default"], str) and r["default"].startswith(UNRESOLVED)):
            if f["default"] != r["default"]:
                return False
    return True


def _method(cls: type, name: str) -> tuple:
    raw = inspect.getattr_static(cls, name)
    if isinstance(raw, property):
        return raw.fget, True
    if isinstance(raw, staticmethod):
        return raw.__func__, False
    return getattr(cls, name), True


def test_the_fake_is_the_torch_npu_release_paired_with_this_torch(fake):
    expected = "2.1.0.post8" if OLD else f"{_TORCH[0]}.{_TORCH[1]}.0"
    assert fake.__version__ == fake.version.__version__ == expected
    assert expected.split(".")[:2] == torch.__version__.split(".")[:2] or OLD


def test_every_public_name_of_the_fake_has_the_real_signature(fake):
    version, api = _release_api()
    problems = []
    for module, entry in api.items():
        if not _public(module) or not entry["exists"]:
            continue
        mod = importlib.import_module(module)
        real_all = set(entry["__all__"] or ())
        fake_all = set(getattr(mod, "__all__", ()))
        if entry["__all__"] is not None and not fake_all <= real_all:
            problems.append(f"{module}.__all__ has {sorted(fake_all - real_all)}, which torch-npu {version} lacks")
        for name, real in entry["names"].items():
            if name.startswith("_") and name not in real_all:
                continue  # the fake's own helpers
            obj = getattr(mod, name, None)
            if real is None:
                if obj is not None:
                    problems.append(f"{module}.{name} exists in the fake but not in torch-npu {version}")
                continue
            if obj is None:
                problems.append(f"{module}.{name} is missing from the fake (torch-npu {version} has it)")
                continue
            if "from" in real:
                continue  # defined in the C extension: no source signature to compare
            if "class" in real:
                for meth, sig in real["class"].items():
                    present = meth in vars(obj) or any(meth in vars(b) for b in obj.__mro__[1:-1])
                    if sig is None:
                        if present and meth != "__init__":
                            problems.append(f"{module}.{name}.{meth} exists in the fake but not in torch-npu {version}")
                        continue
                    fn, bound = _method(obj, meth)
                    if not _same(_params(fn, bound), sig["params"]):
                        problems.append(f"{module}.{name}.{meth}{inspect.signature(fn)} differs from torch-npu "
                                        f"{version}: {sig['params']}")
            elif not _same(_params(obj, False), real["params"]):
                problems.append(f"{module}.{name}{inspect.signature(obj)} differs from torch-npu {version}: "
                                f"{real['params']}")
    assert not problems, "\n".join(problems)


def test_every_public_name_the_fake_defines_is_in_the_data():
    """A name added to the fake needs the real wheels read again: ``python tools/torch_npu_api.py --download``."""
    sys.path.insert(0, os.path.dirname(TOOL))
    try:
        tool = importlib.import_module("torch_npu_api")
    finally:
        sys.path.remove(os.path.dirname(TOOL))
    data = _data()
    for version in tool.VERSIONS:
        for module, tree in tool.fake_modules().items():
            assert module in data[version], f"{module}: rerun tools/torch_npu_api.py --download"
            assert set(tool._top_level(tree)) == set(data[version][module]["names"]), (
                f"{module}: rerun tools/torch_npu_api.py --download"
            )


def test_the_data_is_what_the_wheels_say(tmp_path):
    sys.path.insert(0, os.path.dirname(TOOL))
    try:
        tool = importlib.import_module("torch_npu_api")
    finally:
        sys.path.remove(os.path.dirname(TOOL))
    if tool.cached_wheels() is None:
        pytest.skip(f"the torch-npu wheels {', '.join(tool.VERSIONS)} are not in {tool.CACHE} "
                    "(python tools/torch_npu_api.py --download fetches them)")
    result = subprocess.run([sys.executable, TOOL, "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
