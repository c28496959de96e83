"""Read a precision dump into the one model (:mod:`.model`), whichever tool wrote it.

Layouts read (see :mod:`.sources` for where they live):

- **msprobe** and ascend_tune's built-in engine: ``dump.json`` = ``{task, level, framework, dump_data_dir,
  data: {op name: {input_args, input_kwargs, output[, parameters]} | {input, output} | {param: [tensor]}}}``, each
  tensor ``{type, dtype, shape, Max, Min, Mean, Norm, requires_grad[, md5][, data_name]}``, scalars
  ``{type, value}``; ``stack.json`` (either form, :mod:`.stacks`); ``construct.json`` = ``{op name: parent
  module}``; tensors in ``dump_tensor_data/<data_name>`` (``.pt``).
- the built-in engine's **journal** (``dump.journal``) of a step whose process died before the step ended: the
  step is rebuilt from its lines (``complete=False``; names, dtypes, shapes, stacks and parents, no statistics).
  Lines: ``{"header": {...}}``, ``{"stack": id, "frames": [...]}``, ``{"name": ..., "data"?: {...}, "stack"?: id,
  "parent"?: name}`` (an entry's parts are merged by name).
- **ptdbg_ascend**'s ``*.pkl`` JSON lines: :mod:`.ptdbg`.

Ops are in the order the index lists them (the order they were first seen). :func:`read_dump` takes a path;
:func:`read_index` one dump of an opened location; :func:`dump_from_index` the index already in memory (the
built-in engine's step, checked for overflows before anything is read back).
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from ...errors import InputError
from ...formats.dump_layout import CONSTRUCT_JSON, DUMP_JSON, JOURNAL, STACK_JSON, TENSOR_DIR, WRITER
from .layouts import INDEX_KINDS, index_kind
from .model import NO_STATS, Dump, Leaf, Op, Stats, as_float
from .sources import DumpFiles, DumpRef, open_location, select_dump
from .stacks import frames_of, parse_stacks

_TENSOR_TYPES = ("torch.Tensor", "mindspore.Tensor", "numpy.ndarray", "torch.nn.parameter.Parameter")
_KEY_ORDER = ("input_args", "input_kwargs", "parameters", "input")  # msprobe's row order: inputs, then outputs


def read_dump(path: str, step: Optional[int] = None, rank: Optional[int] = None) -> Dump:
    """Read one step of one rank.

    Parameters:
        path: a rank folder, a ``step<N>`` folder holding one, a dump root, a ``dump.json`` / ptdbg ``.pkl``, or a
            packed archive (read in place; the archive stays open for :meth:`Dump.load_tensor`).
        step, rank: which dump, when ``path`` holds several.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(f"{path!r} does not exist; pass a dump's step<N> folder or the rank folder inside it")
    files, refs = open_location(path)
    try:
        dump = read_index(files, select_dump(refs, path, step, rank, how="step= / rank="))
    finally:
        if files.on_disk:
            files.close()
    return dump


def read_index(files: DumpFiles, ref: DumpRef) -> Dump:
    """Read the dump ``ref`` of an opened location (:func:`.sources.open_location`)."""
    label = files.label if not ref.folder else f"{files.label}:{ref.folder}"
    kind = index_kind(ref.index.rpartition("/")[2], named=True)
    if kind is None or kind.layout != ref.layout:
        kind = next(k for k in INDEX_KINDS if k.layout == ref.layout)
    return kind.read(files, ref, label)


def dump_from_index(index: Any, stacks: dict, construct: Any, label: str, **where: Any) -> Dump:
    """A :class:`Dump` of a dump.json's content already in memory.

    Parameters:
        index: dump.json's object; stacks: op name -> frame strings (:func:`.stacks.parse_stacks`);
        construct: construct.json's object.
        where: the other :class:`Dump` fields (``files``, ``step``, ``rank``, ``path``, ``complete``, ``source``);
            ``folder`` (the index's folder inside ``files``) finds the saved tensors.
    """
    if not isinstance(index, dict) or not isinstance(index.get("data"), dict):
        raise InputError(
            f"{label}: not a dump index (no 'data' object); pass msprobe's or ascend_tune's dump.json"
        )
    parents = construct if isinstance(construct, dict) else {}
    ops, malformed = [], 0
    for name, entry in index["data"].items():
        if not isinstance(entry, dict):
            malformed += 1
            continue
        parent = parents.get(name)
        ops.append(Op(name, tuple(_entry_leaves(entry)), parent if isinstance(parent, str) else None,
                      stacks.get(name, ())))
    folder = where.pop("folder", "")
    files = where.get("files")
    tensor_dir = f"{folder}/{TENSOR_DIR}" if folder else TENSOR_DIR
    first = next((leaf.data_name for op in ops for leaf in op.leaves if leaf.data_name), None)
    has_data = files is not None and first is not None and files.exists(f"{tensor_dir}/{first}")
    return Dump(
        label, "msprobe", str(index.get("task") or "statistics"), index.get("level"), tuple(ops), tuple(parents),
        malformed, data_folder=tensor_dir if has_data else None, framework=index.get("framework"),
        dump_data_dir=index.get("dump_data_dir"), data=index["data"], construct=parents,
        writer=index.get(WRITER) if isinstance(index.get(WRITER), dict) else None, **where,
    )


def load_json(files: DumpFiles, name: str, label: str) -> Any:
    """One JSON file of a location; an InputError that says what is wrong when it is not JSON."""
    raw = files.read(name)
    if b"\x00" in raw[:4096]:
        raise InputError(f"{label}: {name} is a binary file, not a dump index")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise InputError(f"{label}: {name} is not valid JSON ({exc}); is the dump complete?") from None


def _where(files: DumpFiles, ref: DumpRef) -> dict:
    path = os.path.join(files.root, *ref.folder.split("/")) if files.on_disk and ref.folder else files.root
    return dict(files=files, folder=ref.folder, step=ref.step, rank=ref.rank, path=path if files.on_disk else None)


def read_json_index(files: DumpFiles, ref: DumpRef, label: str) -> Dump:
    """A dump.json's dump (the msprobe layout's index)."""
    index = load_json(files, ref.index, label)
    if not isinstance(index, dict) or not isinstance(index.get("data"), dict):
        raise InputError(
            f"{label}: {ref.index} is not a dump index (no 'data' object); pass msprobe's or ascend_tune's dump.json"
        )
    prefix = f"{ref.folder}/" if ref.folder else ""
    stacks = parse_stacks(_optional_json(files, prefix + STACK_JSON, label))
    construct = _optional_json(files, prefix + CONSTRUCT_JSON, label)
    return dump_from_index(index, stacks, construct, label, source=DUMP_JSON, **_where(files, ref))


def _optional_json(files: DumpFiles, name: str, label: str) -> Any:
    return load_json(files, name, label) if files.exists(name) else {}


def read_journal(files: DumpFiles, ref: DumpRef, label: str) -> Dump:
    """A dump.journal's dump (a step whose process died before it ended)."""
    header: dict = {}
    data: dict = {}
    stacks: dict = {}
    frames_by_id: dict = {}
    construct: dict = {}
    for line in files.read(ref.index).decode("utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:  # the line being written when the process died
            continue
        if not isinstance(record, dict):
            continue
        if "header" in record:
            header = record["header"] if isinstance(record["header"], dict) else {}
        elif "frames" in record:
            frames_by_id[record.get("stack")] = frames_of(record["frames"])
        elif "name" in record:
            name = record["name"]
            entry = data.setdefault(name, {})  # a bare name: the op was running when the process died
            if isinstance(record.get("data"), dict):
                entry.update(record["data"])
            if "stack" in record:
                stacks[name] = frames_by_id.get(record["stack"], ())
            if "parent" in record:
                construct[name] = record["parent"]
    index = dict(header, data=data)
    parents = construct if header.get("level") != "L1" else {}
    return dump_from_index(index, stacks, parents, label, complete=False, source=JOURNAL, **_where(files, ref))


def _entry_leaves(entry: dict) -> list:
    """An index entry's leaves: inputs (arguments, keyword arguments, parameters) first, then outputs."""
    leaves: list = []
    keys = [k for k in _KEY_ORDER if k in entry] + [k for k in entry if k not in _KEY_ORDER and k != "output"]
    for key in keys + (["output"] if "output" in entry else []):
        value = entry[key]
        if key == "input_args":
            _flatten(value, "input", "input", leaves)
        elif key == "input_kwargs" and isinstance(value, dict):
            for kw, item in value.items():
                _flatten(item, f"input.{kw}", "input", leaves)
        elif key in ("input", "output"):
            _flatten(value, key, key, leaves)
        elif key == "parameters" and isinstance(value, dict):
            for pname, item in value.items():
                _flatten(item, f"parameters.{pname}", "input", leaves, unwrap=True)
        elif isinstance(value, (list, dict)):  # a parameter-gradient entry: {"weight": [tensor], ...}
            _flatten(value, key, "output", leaves, unwrap=True)
    return leaves


def _flatten(value: Any, slot: str, role: str, out: list, unwrap: bool = False, depth: int = 0) -> None:
    if depth > 32:
        return
    if isinstance(value, dict) and "type" in value:
        out.append(_leaf(value, slot, role))
    elif value is None:
        out.append(Leaf(slot, role, "none", "N/A", None, NO_STATS))
    elif isinstance(value, (list, tuple)):
        if unwrap and len(value) == 1:
            _flatten(value[0], slot, role, out, depth=depth + 1)
        else:
            for i, item in enumerate(value):
                _flatten(item, f"{slot}.{i}", role, out, depth=depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{slot}.{key}", role, out, depth=depth + 1)


def _leaf(entry: dict, slot: str, role: str) -> Leaf:
    kind_of = entry.get("type")
    if kind_of in _TENSOR_TYPES or "Max" in entry:
        shape = entry.get("shape")
        data_name = entry.get("data_name")
        return Leaf(
            slot, role, "tensor", str(entry.get("dtype")), tuple(shape) if isinstance(shape, list) else None,
            Stats(*(as_float(entry.get(k)) for k in ("Max", "Min", "Mean", "Norm"))),
            entry.get("requires_grad") if isinstance(entry.get("requires_grad"), bool) else None,
            entry.get("md5"), data_name if isinstance(data_name, str) and data_name != "-1" else None,
            has_stats=entry.get("Max") is not None and entry.get("Min") is not None,
        )
    value = entry.get("value")
    dtype = f"<class '{kind_of}'>"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Leaf(slot, role, "scalar", dtype, (), Stats(*(float(value),) * 4), value=value)
    return Leaf(slot, role, "other", dtype, (), NO_STATS, value=value)
