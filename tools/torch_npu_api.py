"""Read the real torch-npu wheels' Python sources with ``ast`` and write the API the fake torch_npu mirrors.

Usage::

    python tools/torch_npu_api.py --download            # fetch the wheels below into the cache, then write the data
    python tools/torch_npu_api.py WHEEL.whl ...         # read these wheels instead
    python tools/torch_npu_api.py --check               # compare the committed data with the cached wheels

The wheels are read as zip files and never installed or imported (an installed torch-npu breaks ``import torch``
on a machine without CANN). For each module the fake ships (``ascend_tune/testing/fakes/torch_npu``), the data holds
the real module's ``__all__`` and the signature of every function, class and method the fake defines there:
parameter names, kinds and defaults (literal defaults as values; ``Constant.LEVEL0``-style names resolved through
the real module's constants where they are literals, else kept as source text). ``tests/test_fake_torch_npu_api.py``
checks the fake against it; this script is how the data is made, so the data is never typed by hand.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import zipfile
from typing import Any, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKE = os.path.join(ROOT, "ascend_tune", "testing", "fakes", "torch_npu")
DATA = os.path.join(ROOT, "tests", "data", "torch_npu_api.json")
CACHE = os.environ.get("ASCEND_TUNE_NPU_WHEELS", os.path.join(os.path.expanduser("~"), ".cache", "ascend_tune",
                                                                "torch-npu-wheels"))
# The oldest torch-npu 2.1.0 release on the registry (what the fake follows on torch 2.1), and the newest release.
VERSIONS = ("2.1.0.post8", "2.14.0")
UNRESOLVED = "<source>"  # prefix of a default kept as source text


def fake_modules() -> dict:
    """``{dotted module: ast of the fake's file}`` for every module of the fake torch_npu."""
    out: dict = {}
    for folder, _, files in os.walk(FAKE):
        for name in sorted(files):
            if not name.endswith(".py") or name.startswith("_fake"):
                continue  # the fake's own bookkeeping (_fake_release) has no real counterpart
            rel = os.path.relpath(os.path.join(folder, name), os.path.dirname(FAKE))[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                out[".".join(rel)] = ast.parse(fh.read())
    return out


def wheel_modules(path: str) -> tuple[str, dict, set]:
    """``(version, {dotted module: ast}, package names)`` of a torch-npu wheel's Python files."""
    out: dict = {}
    packages: set = set()
    version = None
    with zipfile.ZipFile(path) as whl:
        for name in whl.namelist():
            if not (name.startswith("torch_npu/") and name.endswith(".py")):
                continue
            parts = name[:-3].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
                packages.add(".".join(parts))
            try:
                out[".".join(parts)] = ast.parse(whl.read(name).decode("utf-8"))
            except SyntaxError:
                continue
        for name in whl.namelist():
            if name.endswith(".dist-info/METADATA"):
                for line in whl.read(name).decode("utf-8").splitlines():
                    if line.startswith("Version:"):
                        version = line.split(":", 1)[1].strip()
    if version is None:
        raise SystemExit(f"{path}: no METADATA Version in the wheel")
    return version, out, packages


def _top_level(tree: ast.Module) -> dict:
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _all(tree: ast.Module) -> Optional[list]:
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        else:
            targets = [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
            try:
                return sorted(ast.literal_eval(node.value))
            except ValueError:
                return None
    return None


class _Resolver:
    """Resolves ``Name.attr`` defaults to literals through class bodies in the module and the modules it imports."""

    def __init__(self, modules: dict, packages: set):
        self.modules = modules
        self.packages = packages

    def value(self, module: str, node: ast.expr) -> Any:
        try:
            return ast.literal_eval(node)
        except ValueError:
            pass
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found = self._class_attr(module, node.value.id, node.attr, depth=0)
            if found is not None:
                return found[0]
        return UNRESOLVED + ast.unparse(node)

    def _class_attr(self, module: str, cls: str, attr: str, depth: int) -> Optional[tuple]:
        tree = self.modules.get(module)
        if tree is None or depth > 3:
            return None
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == cls:
                for item in node.body:
                    if isinstance(item, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == attr for t in item.targets
                    ):
                        try:
                            return (ast.literal_eval(item.value),)
                        except ValueError:
                            if isinstance(item.value, ast.Attribute) and isinstance(item.value.value, ast.Name):
                                return self._class_attr(module, item.value.value.id, item.value.attr, depth + 1)
                            return None
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == cls for a in node.names):
                real = next(a.name for a in node.names if (a.asname or a.name) == cls)
                return self._class_attr(_absolute(module, node, self.packages), real, attr, depth + 1)
        return None


def _absolute(module: str, node: ast.ImportFrom, packages: set) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    # a package's own module name is its folder, so its relative imports start one level deeper
    base = base[: len(base) - node.level + (1 if module in packages else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _signature(fn: ast.FunctionDef, module: str, resolver: _Resolver, method: bool) -> dict:
    a = fn.args
    params = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        if method and i == 0:
            continue  # self / cls
        kind = "POSITIONAL_ONLY" if arg in a.posonlyargs else "POSITIONAL_OR_KEYWORD"
        params.append(_param(arg.arg, kind, default, module, resolver))
    if a.vararg:
        params.append({"name": a.vararg.arg, "kind": "VAR_POSITIONAL"})
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        params.append(_param(arg.arg, "KEYWORD_ONLY", default, module, resolver))
    if a.kwarg:
        params.append({"name": a.kwarg.arg, "kind": "VAR_KEYWORD"})
    return {"params": params}


def _param(name: str, kind: str, default: Optional[ast.expr], module: str, resolver: _Resolver) -> dict:
    out: dict = {"name": name, "kind": kind}
    if default is not None:
        out["default"] = resolver.value(module, default)
    return out


def _is_static(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)


def api(real: dict, packages: set, fake: dict) -> dict:
    """The real API for each name the fake defines: ``{module: {"__all__": [...], "names": {name: signature}}}``;
    a name the real module lacks is recorded as ``null``."""
    resolver = _Resolver(real, packages)
    out = {}
    for module, fake_tree in sorted(fake.items()):
        real_tree = real.get(module)
        entry: dict = {"exists": real_tree is not None, "__all__": _all(real_tree) if real_tree else None, "names": {}}
        for name, node in _top_level(fake_tree).items():
            found = _definition(real, packages, module, name)
            target, where = found if found else (None, module)
            if isinstance(target, str):
                entry["names"][name] = {"from": target}  # imported from a compiled module: no source to read
            elif target is None:
                entry["names"][name] = None
            elif isinstance(target, ast.ClassDef):
                entry["names"][name] = {"class": _class_api(_methods(real, packages, target, where), node, resolver)}
            else:
                entry["names"][name] = _signature(target, where, resolver, method=False)
        out[module] = entry
    return out


def _definition(real: dict, packages: set, module: str, name: str, depth: int = 0) -> Optional[tuple]:
    """``(def node, defining module)`` of ``name`` as seen in ``module``: defined there or imported into it;
    ``(module name, module)`` when it is imported from a module without Python source (the C extension)."""
    tree = real.get(module)
    if tree is None or depth > 4:
        return None
    node = _top_level(tree).get(name)
    if node is not None:
        return node, module
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    source = _absolute(module, stmt, packages)
                    if source not in real:
                        return (source, module) if source.startswith("torch_npu") else None
                    return _definition(real, packages, source, alias.name, depth + 1)
    return None


def _methods(real: dict, packages: set, cls: ast.ClassDef, module: str, depth: int = 0) -> dict:
    """``{name: (def node, module)}`` of the methods ``cls`` has, its own first, then its bases' (when they are
    classes of the package)."""
    out = {n.name: (n, module) for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if depth > 4:
        return out
    for base in cls.bases:
        if isinstance(base, ast.Name):
            found = _definition(real, packages, module, base.id)
            if found and isinstance(found[0], ast.ClassDef):
                for name, item in _methods(real, packages, found[0], found[1], depth + 1).items():
                    out.setdefault(name, item)
    return out


def _class_api(real_methods: dict, fake: ast.ClassDef, resolver: _Resolver) -> dict:
    out = {}
    for node in fake.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            not node.name.startswith("_") or node.name == "__init__"
        ):
            found = real_methods.get(node.name)
            if found is None and node.name == "__init__":
                found = real_methods.get("__new__")  # a class built in __new__ (torch_npu.npu.Event)
            if found is None:
                out[node.name] = None
            else:
                target, where = found
                out[node.name] = _signature(target, where, resolver, not _is_static(target))
    return out


def download(versions: tuple, folder: str) -> list:
    """Fetch the wheels (``pip download --no-deps``, the running Python's tags) into ``folder``; their paths."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for version in versions:
        found = _cached(version, folder)
        if found is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"torch-npu=={version}",
                            "-d", folder], check=True)
            found = _cached(version, folder)
        if found is None:
            raise SystemExit(f"torch-npu=={version}: pip download wrote no wheel into {folder}")
        paths.append(found)
    return paths


def _cached(version: str, folder: str) -> Optional[str]:
    if not os.path.isdir(folder):
        return None
    for name in sorted(os.listdir(folder)):
        if name.startswith(f"torch_npu-{version}-") and name.endswith(".whl"):
            return os.path.join(folder, name)
    return None


def cached_wheels(folder: str = CACHE) -> Optional[list]:
    """The wheels of every version in VERSIONS found in ``folder``, or None when one is missing."""
    paths = [_cached(v, folder) for v in VERSIONS]
    return None if None in paths else paths


def build(paths: list) -> dict:
    fake = fake_modules()
    data: dict = {"_about": "made by tools/torch_npu_api.py from the torch-npu wheels' sources (ast, never imported)"}
    for path in paths:
        version, real, packages = wheel_modules(path)
        data[version] = api(real, packages, fake)
    return data


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheels", nargs="*", help="torch-npu wheels to read (default: the cached ones)")
    parser.add_argument("--download", action="store_true", help=f"pip download torch-npu {', '.join(VERSIONS)}")
    parser.add_argument("--check", action="store_true", help="compare the committed data, write nothing")
    parser.add_argument("--out", default=DATA)
    args = parser.parse_args(argv)
    paths = args.wheels or (download(VERSIONS, CACHE) if args.download else cached_wheels())
    if not paths:
        print(f"no torch-npu wheels in {CACHE}: run with --download", file=sys.stderr)
        return 2
    data = build(paths)
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.check:
        with open(args.out, encoding="utf-8") as fh:
            same = fh.read() == text
        print("the data matches the wheels" if same else f"{args.out} differs from the wheels: rerun this script")
        return 0 if same else 1
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {args.out} from {', '.join(os.path.basename(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
