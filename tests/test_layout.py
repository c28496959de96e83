"""The package's layout keeps its promises: offline rooms import no torch, imports go one way, no cycles."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import subprocess
import sys
from pathlib import Path

import ascend_tune
from ascend_tune.contract.callbacks import FEATURES

PACKAGE = Path(ascend_tune.__file__).parent
ROOT = PACKAGE.parent
_spec = importlib.util.spec_from_file_location("architecture_map", ROOT / "tools" / "architecture_map.py")
architecture_map = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(architecture_map)  # the layers and the map of docs/architecture.md


def _modules(under: Path = PACKAGE) -> dict:
    """Dotted module name -> source path, for every module of the package outside the fakes."""
    found = {}
    for path in sorted(under.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        if "fakes" in rel.parts:
            continue
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: dict, type_checking: bool = False) -> set:
    """The package modules ``name`` imports anywhere in its body (lazy ones too); ``type_checking``: also those
    imported only for type checking."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip = set()
    for node in ast.walk(tree):  # `if TYPE_CHECKING:` blocks import nothing at run time
        if not type_checking and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


def test_no_module_of_analysis_imports_torch():
    names = sorted(n for n in _modules() if n.startswith("ascend_tune.analysis"))
    assert len(names) > 10
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "heavy = sorted(m for m in ('torch', 'matplotlib', 'tensorboard', 'msprobe') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"importing ascend_tune.analysis pulled in {done.stdout.strip()}"


def _cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    found = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            connect(name)
    return found


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_the_package_modules_also_for_type_checking():
    known = _modules()
    graph = {name: _imports(name, path, known, type_checking=True) for name, path in known.items()}
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_offline_rooms_never_import_the_cli_or_the_runtime():
    known = _modules()
    above = ("ascend_tune.runtime", "ascend_tune.contract", "ascend_tune.cli", "ascend_tune.recording",
             "ascend_tune.launch", "ascend_tune.demo", *FEATURES.values())
    wrong = [f"{name} -> {target}" for name, path in known.items()
             if _in_package(name, "ascend_tune.analysis") or _in_package(name, "ascend_tune.formats")
             for target in _imports(name, path, known) if any(_in_package(target, a) for a in above)]
    assert not wrong, wrong


def _layer(name: str) -> int:
    return architecture_map.layer_of(name)


def test_every_module_is_in_a_layer_and_imports_go_down():
    known = _modules()
    layers = architecture_map.LAYERS
    wrong = [f"{name} ({layers[_layer(name)][0]}) -> {target} ({layers[_layer(target)][0]})"
             for name, path in known.items() for target in _imports(name, path, known, type_checking=True)
             if _layer(target) < _layer(name)]
    assert not wrong, wrong


def test_the_package_top_holds_the_base_and_the_entry_points_only():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top
    assert top == ["__init__.py", "__main__.py", "_version.py", "config.py", "device.py", "errors.py", "lazy.py",
                   "pytest_plugin.py"]


def test_no_module_is_past_the_size_a_reader_can_hold():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > 400}
    assert not long, f"split these modules: {long}"


# the runtime modules a reader follows step by step: no function there longer than a screen
SHORT_FUNCTIONS = ("ascend_tune.runtime.monitor", "ascend_tune.runtime.capture", "ascend_tune.runtime.steps",
                   "ascend_tune.recording")


def test_no_function_of_the_step_path_is_past_a_screen():
    long = []
    for name, path in _modules().items():
        if name.startswith(SHORT_FUNCTIONS):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        node.end_lineno - node.lineno + 1 > 60:
                    long.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not long, f"split these functions: {long}"


def _in_package(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


# what a feature's modules may import besides their own package: the layers below the features
BELOW_FEATURES = tuple(p for _, _, packages in architecture_map.LAYERS[3:] for p in packages if p != "ascend_tune")


def test_a_feature_imports_only_the_layers_below_it_never_another_feature():
    known = _modules()
    wrong = []
    for feature in FEATURES.values():
        for name, path in known.items():
            if not _in_package(name, feature):
                continue
            for target in _imports(name, path, known, type_checking=True):
                if target == "ascend_tune" or _in_package(target, feature):
                    continue
                if not any(_in_package(target, below) for below in BELOW_FEATURES):
                    wrong.append(f"{name} -> {target}")
    assert not wrong, wrong


def test_the_recording_layer_imports_no_feature_and_nothing_above_it():
    known = _modules()
    allowed = ("ascend_tune.recording", "ascend_tune.formats", "ascend_tune.errors")
    wrong = [f"{name} -> {target}" for name, path in known.items() if _in_package(name, "ascend_tune.recording")
             for target in _imports(name, path, known, type_checking=True)
             if not any(_in_package(target, a) for a in allowed)]
    assert not wrong, wrong


def test_every_feature_is_a_package_of_the_same_shape():
    """config.py with a FeatureConfig subclass, callback.py with build_callback(value, ctx), a lazy __init__."""
    from ascend_tune.config import FeatureConfig

    for option, package in FEATURES.items():
        folder = ROOT / package.replace(".", "/")
        assert {"__init__.py", "config.py", "callback.py"} <= {p.name for p in folder.iterdir()}, package
        config = importlib.import_module(f"{package}.config")
        configs = [v for v in vars(config).values()
                   if isinstance(v, type) and issubclass(v, FeatureConfig) and v.__module__ == config.__name__]
        assert [c.OPTION for c in configs] == [option], package
        callback = importlib.import_module(f"{package}.callback")
        assert list(inspect.signature(callback.build_callback).parameters) == ["value", "ctx"], package
        init = (folder / "__init__.py").read_text(encoding="utf-8")
        assert "lazy_names(__name__" in init, f"{package}/__init__.py re-exports through ascend_tune.lazy"


def test_the_map_of_docs_architecture_is_the_modules_own():
    assert architecture_map.on_page() == architecture_map.render(), (
        "docs/architecture.md's map is not the modules' own (a module added, moved or gone, or a docstring's first "
        "sentence changed): python tools/architecture_map.py --write")
