"""The map of docs/architecture.md, made from the modules themselves: every module of ``ascend_tune/`` (the fakes
aside) under its layer and room, with the first sentence of its own docstring. tests/test_layout.py fails when the
page's map is not what this makes (a module missing from it, or one it names that is gone), and holds the imports
to the layers listed here.

Usage: python tools/architecture_map.py           print the map
       python tools/architecture_map.py --write   rewrite it in docs/architecture.md, between its two markers
"""

from __future__ import annotations

import ast
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "architecture.md")
BEGIN = "<!-- the map: made by tools/architecture_map.py from the modules' docstrings; do not edit by hand -->"
END = "<!-- end of the map -->"
sys.path.insert(0, ROOT)
from ascend_tune.contract.callbacks import FEATURES  # noqa: E402 (the registry: a light module, no torch)

FEATURE_PACKAGES = tuple(FEATURES.values())
# The layers, top to bottom, by package: a module imports its own layer or the ones below, and within the
# features no feature imports another.
LAYERS = (
    ("entry points", "what a user runs: the CLI, the launcher, the demo, the pytest plugin, the shared test kit",
     ("ascend_tune.__main__", "ascend_tune.cli", "ascend_tune.launch", "ascend_tune.demo",
      "ascend_tune.pytest_plugin", "ascend_tune.testing")),
    ("runtime", "the monitor's own machinery, what runs inside the user's `with` block", ("ascend_tune.runtime",)),
    ("features", "one package each, one shape each (config.py, callback.py with build_callback, work modules)",
     FEATURE_PACKAGES),
    ("feature contract and recording", "what every feature plugs into, and seeing the calls of a step",
     ("ascend_tune.contract", "ascend_tune.recording")),
    ("analysis", "pure functions over the files runs write, no torch", ("ascend_tune.analysis",)),
    ("formats", "contracts between the writers and the readers of a run's files", ("ascend_tune.formats",)),
    ("base", "the package's public names, configs, errors, the device", (
        "ascend_tune.config", "ascend_tune.device", "ascend_tune.errors", "ascend_tune.lazy", "ascend_tune._version",
        "ascend_tune")),
)


def modules() -> dict:
    """Dotted module name -> source path, every module of the package outside the fakes."""
    found = {}
    package = os.path.join(ROOT, "ascend_tune")
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d not in ("fakes", "__pycache__"))
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def in_package(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def layer_of(name: str) -> int:
    """The index in LAYERS of the most specific package holding ``name`` (ValueError: in none)."""
    matches = [(len(p), i) for i, (_, _, packages) in enumerate(LAYERS) for p in packages if in_package(name, p)]
    if not matches:
        raise ValueError(f"{name} is in no layer of tools/architecture_map.LAYERS")
    return max(matches)[1]


def first_sentence(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        doc = ast.get_docstring(ast.parse(fh.read())) or ""
    paragraph = " ".join(doc.split("\n\n")[0].split())
    found = re.match(r"(.+?[.!?])(\s+[A-Z`(*]|$)", paragraph)
    return (found.group(1) if found else paragraph) or "(no docstring)"


def render() -> str:
    """The map's Markdown: a heading per layer, a line per module under its room."""
    known = modules()
    out = []
    for index, (title, what, _) in enumerate(LAYERS):
        out += [f"### {title}: {what}", ""]
        for name in (n for n in known if layer_of(n) == index):
            rel = os.path.relpath(known[name], os.path.join(ROOT, "ascend_tune")).replace(os.sep, "/")
            out.append(f"- `{rel}`: {first_sentence(known[name])}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def on_page() -> str:
    """The map as docs/architecture.md holds it now."""
    with open(PAGE, encoding="utf-8") as fh:
        text = fh.read()
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def write() -> None:
    with open(PAGE, encoding="utf-8") as fh:
        text = fh.read()
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    with open(PAGE, "w", encoding="utf-8") as fh:
        fh.write(f"{head}{BEGIN}\n\n{render()}\n{END}{tail}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    elif sys.argv[1:]:
        sys.exit(__doc__.split("\n\n")[1])
    else:
        sys.stdout.write(render())
