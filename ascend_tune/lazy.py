"""THE lazy loader of a package's public names: ``ascend_tune``, each feature package and ``testing`` re-export
their names this one way, each loaded on first use, so importing a package (``import ascend_tune``, the CLI's
offline commands) does not pay for torch or for the features it does not use. And the old names of modules that
moved (:func:`keep_moved_modules`): an import of the old name is the module itself, loaded on first use."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any, Callable, Optional


def lazy_names(package: str, names: dict) -> tuple[Callable[[str], Any], Callable[[], list]]:
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps each public name to the module that defines it.

    Parameters:
        package: the package's ``__name__`` (for the AttributeError of an unknown name).
        names: public name -> absolute module name.
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list:
        return sorted(names)

    return __getattr__, __dir__


def keep_moved_modules(moved: dict) -> None:
    """Make each old module name of ``moved`` (old -> new absolute name) import the new module itself: ``import
    ascend_tune.monitor`` and ``from ascend_tune.callbacks import Callback`` keep working, with one module object
    under both names (a patch through either is one patch). Nothing is imported until an old name is."""
    if not any(isinstance(f, _MovedModules) and f.moved == moved for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules(moved))


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds only the old names; loading one is importing its new module."""

    def __init__(self, moved: dict):
        self.moved = moved

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        return importlib.util.spec_from_loader(name, self) if name in self.moved else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return importlib.import_module(self.moved[spec.name])

    def exec_module(self, module: Any) -> None:
        pass  # the new module ran when it was imported
