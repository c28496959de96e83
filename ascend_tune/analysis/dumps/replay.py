"""Replay verdicts: the standard a call replayed on the CPU in float64 is judged by, replay.csv / replay.json, and
their reader.

The builtin engine's ``task="replay"`` (:mod:`ascend_tune.precision.replay`) recomputes each API call of a step
on the CPU in float64 from the same inputs and measures, per output tensor, how far the device's result ``d`` is
from that golden result ``g`` (both in float64):

- ``max_abs_err``: ``max |d - g|``;
- ``max_rel_err``: ``max |d - g| / max(|g|, rms(g))``: each element's error relative to itself, or to the
  tensor's RMS where the element is smaller than that (a value that cancels to near zero is judged on the tensor's
  scale, as every correct kernel's rounding is);
- ``err_ratio``: the fraction of elements whose ``max_rel_err`` term exceeds the standard's ``rtol``;
- ``norm_err``: ``||d - g|| / ||g||`` (2-norms over the tensor);
- ``nonfinite``: elements where one side is inf/nan and the other is not (or they differ in kind).

A call is a **suspect** when an output has a ``nonfinite`` element, ``err_ratio > max_err_ratio`` or
``norm_err > max_norm_err``, under the standard of the least precise floating dtype among its outputs (for a
backward: the gradients, the incoming gradient and the forward call's output, so a float32 weight's gradient that
autocast computed in bfloat16 is judged as bfloat16). Inputs do not lower the standard: the replay starts from the
very values the device had. The limits sit one to two orders of magnitude above the rounding of a correct kernel
in that dtype (inputs rounded to bf16 by autocast included) and below a kernel 1e-3 relative off in float32
(msprobe's accuracy checker judges fp32 at the thousandth level too). Integer and bool outputs must match exactly;
index outputs of sorting ops are not compared (ties may break either way).

No torch here: the runtime measures, this module judges, writes and reads.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import asdict, dataclass, replace
from typing import Any, Optional

from ...errors import InputError
from ...formats.dump_layout import REPLAY_COLUMNS, REPLAY_JSON, rank_of_dump_dir, step_of_dir
from .archive import VerifiedArchive, is_archive
from .differences import ReplayError
from .model import Frame
from .sources import DumpFiles
from .tolerance import STANDARDS, Standard

PASS, SUSPECT, SKIPPED = "pass", "suspect", "skipped"


def breach(error: ReplayError, standard: Standard) -> Optional[str]:
    """Why ``error`` breaks ``standard`` (one line), or None when the call passes."""
    why = []
    if error.nonfinite:
        why.append(f"{error.nonfinite} element(s) inf/nan where the float64 result is not (or the reverse)")
    if error.err_ratio > standard.max_err_ratio:
        why.append(f"{error.err_ratio:.2%} of elements off by more than rtol {standard.rtol:g} "
                   f"(limit {standard.max_err_ratio:.2%})")
    if error.norm_err > standard.max_norm_err:
        why.append(f"norm error {error.norm_err:.3g} (limit {standard.max_norm_err:g})")
    return "; ".join(why) or None


@dataclass(frozen=True)
class ReplayRow:
    """One replayed call (a forward, or the backward of one) as replay.csv and replay.json hold it."""

    index: int
    name: str
    dtype: str
    shape: tuple
    verdict: str  # pass, suspect or skipped
    metrics: Optional[ReplayError] = None
    standard: Optional[Standard] = None
    reason: str = ""  # why it was skipped, or why it is a suspect
    stack: tuple = ()  # the user's frames (Frame), innermost first

    def as_dict(self) -> dict:
        """replay.json's entry for a suspect."""
        return {"index": self.index, "name": self.name, "dtype": self.dtype, "shape": list(self.shape),
                "metrics": asdict(self.metrics) if self.metrics else None,
                "threshold": asdict(self.standard) if self.standard else None, "reason": self.reason,
                "stack": [f.as_dict() for f in self.stack]}

    @classmethod
    def from_dict(cls, entry: dict) -> ReplayRow:
        """A suspect entry of replay.json read back."""
        threshold = entry.get("threshold")
        standard = Standard(**threshold) if isinstance(threshold, dict) else None
        metrics = entry.get("metrics")
        frames = tuple(Frame(str(f.get("file", "")), int(f.get("line", 0)), str(f.get("function", "")),
                             str(f.get("code", ""))) for f in entry.get("stack") or () if isinstance(f, dict))
        return cls(int(entry.get("index", -1)), str(entry["name"]), str(entry.get("dtype", "")),
                   tuple(entry.get("shape") or ()), SUSPECT,
                   ReplayError.from_dict(metrics) if isinstance(metrics, dict) else None, standard,
                   str(entry.get("reason", "")), frames)


def replay_csv(rows: list) -> bytes:
    """replay.csv: the header (:data:`REPLAY_COLUMNS`) and one line per row, in execution order."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(REPLAY_COLUMNS)
    shapes: dict = {}  # a step's rows share a few shapes and standards: each written once
    standards: dict = {None: ""}
    for r in rows:
        m = r.metrics
        numbers = [f"{m.max_abs_err:.6g}", f"{m.max_rel_err:.6g}", f"{m.err_ratio:.6g}", f"{m.norm_err:.6g}",
                   str(m.nonfinite)] if m else [""] * 5
        shape = shapes.get(r.shape)
        if shape is None:
            shape = shapes[r.shape] = json.dumps(list(r.shape))
        standard = standards.get(r.standard)
        if standard is None:
            standard = standards[r.standard] = r.standard.text()
        writer.writerow([r.index, r.name, r.dtype, shape, r.verdict, *numbers, standard, r.reason])
    return out.getvalue().encode("utf-8")


def replay_summary(step: int, rank: int, rows: list) -> dict:
    """replay.json: the counts, the skip reasons, the suspects in execution order and the first of them."""
    suspects = [r for r in rows if r.verdict == SUSPECT]
    reasons: dict = {}
    for r in rows:
        if r.verdict == SKIPPED:
            reasons[r.reason] = reasons.get(r.reason, 0) + 1
    return {
        "task": "replay", "step": step, "rank": rank, "calls": len(rows),
        "checked": sum(r.verdict != SKIPPED for r in rows), "skipped": sum(reasons.values()),
        "skip_reasons": reasons, "standards": {k: asdict(s) for k, s in STANDARDS.items()},
        "suspects": [r.as_dict() for r in suspects],
        "first_suspect": suspects[0].name if suspects else None,
    }


@dataclass(frozen=True)
class ReplayReport:
    """One replayed step of one rank, read from its replay.json."""

    source: str
    step: Optional[int]
    rank: Optional[int]
    calls: int
    checked: int
    skipped: int
    skip_reasons: tuple  # (reason, count), most frequent first
    suspects: tuple  # ReplayRow, execution order

    @property
    def first_suspect(self) -> Optional[ReplayRow]:
        """The first call in execution order the device got wrong, or None."""
        return self.suspects[0] if self.suspects else None

    @classmethod
    def from_summary(cls, payload: Any, source: str) -> ReplayReport:
        """Build from replay.json's content; InputError naming ``source`` when it is not one."""
        if not isinstance(payload, dict) or payload.get("task") != "replay" or "suspects" not in payload:
            raise InputError(f"{source} is not a replay.json written by ascend_tune (task='replay'); "
                             "pass the dump folder of a run with precision=dict(task='replay')")
        try:
            reasons = sorted((payload.get("skip_reasons") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
            return cls(source, payload.get("step"), payload.get("rank"), int(payload.get("calls", 0)),
                       int(payload["checked"]), int(payload["skipped"]), tuple(reasons),
                       tuple(ReplayRow.from_dict(e) for e in payload["suspects"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{source} is a damaged replay.json ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class ReplayVerdict:
    """Every replayed step found at a location, by step then rank."""

    location: str
    reports: tuple

    @property
    def first(self) -> Optional[tuple]:
        """``(report, row)`` of the first suspect of the earliest step that has one, or None."""
        for report in self.reports:
            if report.suspects:
                return report, report.suspects[0]
        return None


def replay_verdict(path: str, step: Optional[int] = None, rank: Optional[int] = None) -> ReplayVerdict:
    """Read the replay.json files at ``path`` (a dump root, a step or rank folder, a replay.json or an archive made
    by ``pack``), keeping those of ``step`` / ``rank`` when given. InputError when there is none."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(f"{path} does not exist; pass the dump folder of a replayed run or its replay.json")
    if os.path.isdir(path):
        files = DumpFiles(path, root=path)
    elif is_archive(path):
        files = DumpFiles(path, archive=VerifiedArchive(path))
    elif os.path.basename(path).endswith(".json"):
        files = DumpFiles(path, root=os.path.dirname(os.path.abspath(path)))
        return _verdict(path, files, [os.path.basename(path)], step, rank)
    else:
        raise InputError(f"{path} is not a replay: pass a dump folder, a replay.json or an archive made by pack")
    try:
        names = [n for n in files.names() if n.rpartition("/")[2] == REPLAY_JSON]
        return _verdict(path, files, names, step, rank)
    finally:
        files.close()


def _verdict(path: str, files: DumpFiles, names: list, step: Optional[int], rank: Optional[int]) -> ReplayVerdict:
    if not names:
        raise InputError(f"{path} holds no {REPLAY_JSON}; replay a step with precision=dict(task='replay', "
                         "steps=[0]) (or ASCEND_TUNE_DUMP=task=replay,steps=0) and pass its dump folder")
    reports = []
    for name in names:
        label = os.path.join(files.label, name) if os.path.isdir(files.label) else f"{files.label}:{name}"
        try:
            payload = json.loads(files.read(name))
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(f"{label} is not readable JSON ({exc}); was the run interrupted?") from None
        report = ReplayReport.from_summary(payload, label)
        if report.step is None or report.rank is None:  # fall back on the folder names
            parts = name.split("/")
            report = _with_place(report, parts)
        reports.append(report)
    kept = [r for r in reports if step in (None, r.step) and rank in (None, r.rank)]
    if not kept:
        have = ", ".join(f"step {r.step} rank {r.rank}" for r in reports[:6])
        raise InputError(f"{path} has no replay for step={step} rank={rank}; it has: {have}")
    kept.sort(key=lambda r: (-1 if r.step is None else r.step, -1 if r.rank is None else r.rank, r.source))
    return ReplayVerdict(path, tuple(kept))


def _with_place(report: ReplayReport, parts: list) -> ReplayReport:
    rank = report.rank
    if rank is None and len(parts) >= 2:
        rank = rank_of_dump_dir(parts[-2])
    step = report.step
    for part in reversed(parts[:-1]):
        if step is None and step_of_dir(part) is not None:
            step = step_of_dir(part)
    return replace(report, step=step, rank=rank)
