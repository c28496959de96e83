"""THE registry of dump layouts: one row per kind of index file a dump is read from (which layout it is, how its
file is told by its name, the reader, how messages name it). :mod:`.sources` finds dumps with it, :mod:`.read`
reads them with it; a new layout is its reader and one row here (file names live in
:mod:`ascend_tune.formats.dump_layout`).

Readers are named ``"module:function"`` inside this package, called as ``reader(files, ref, label)``, and imported
when used, so the table loads nothing.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Optional

from ...formats.dump_layout import DUMP_JSON, JOURNAL

MSPROBE, PTDBG = "msprobe", "ptdbg"  # DumpRef.layout / Dump.layout: msprobe's (also the builtin engine's), ptdbg's


@dataclass(frozen=True)
class IndexKind:
    """One kind of index file (see the module docstring)."""

    layout: str
    names: str  # how messages name it ("a dump.json")
    reader: str  # "module:function" (files, ref, label) -> Dump
    file: Optional[str] = None  # its exact file name, or
    suffix: Optional[str] = None  # its file name's ending
    named_alone: str = ""  # the ending that also counts when the user names the one file (any *.json)
    yields_to: Optional[str] = None  # ignored in a folder that also holds this file (a journal beside its index)

    def matches(self, base: str, named: bool = False) -> bool:
        """Whether a file called ``base`` is this kind of index (``named``: the one file the user gave)."""
        if named and self.named_alone and base.endswith(self.named_alone):
            return True
        return base == self.file if self.file is not None else bool(self.suffix and base.endswith(self.suffix))

    def read(self, files: Any, ref: Any, label: str) -> Any:
        module, name = self.reader.split(":")
        return getattr(importlib.import_module(f"{__package__}.{module}"), name)(files, ref, label)


INDEX_KINDS = (
    IndexKind(MSPROBE, "a dump.json (msprobe, ascend_tune)", "read:read_json_index", file=DUMP_JSON,
              named_alone=".json"),
    IndexKind(MSPROBE, "a dump.journal (ascend_tune, a step cut short)", "read:read_journal", file=JOURNAL,
              yields_to=DUMP_JSON),
    IndexKind(PTDBG, "a ptdbg .pkl", "ptdbg:read_ptdbg", suffix=".pkl"),
)


def index_kind(base: str, named: bool = False) -> Optional[IndexKind]:
    """The kind of index a file called ``base`` is, or None."""
    return next((k for k in INDEX_KINDS if k.matches(base, named)), None)


def what_dumps() -> str:
    """The index files, in words, for messages."""
    return ", ".join(k.names for k in INDEX_KINDS)
