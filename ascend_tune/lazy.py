"""THE lazy loader of a package's public names: ``ascend_tune``, each feature package and ``testing`` re-export
their names this one way, each loaded on first use, so importing a package (``import ascend_tune``, the CLI's
offline commands) does not pay for torch or for the features it does not use."""

from __future__ import annotations

import importlib
from typing import Any, Callable


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
