"""The run report's model: one run folder's facts gathered into a frozen :class:`RunReport`.

The loss curve (against a baseline when given), throughput, tuning decisions, dynamic shapes, the advisor's
findings on the run's traces, the precision dumps' overflow verdicts and the replayed steps' suspects (calls the
device computed wrongly against the CPU in float64), each linked by step number. With a baseline (the reference
run) the report is the alignment page: :mod:`.alignment` adds the reference's throughput, the speed ratio and the
compare of one step both runs dumped.
:mod:`.render` turns the report into markdown and HTML and writes them; :mod:`.plots` draws its figures.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from ...errors import InputError
from ...formats.dump_layout import REPLAY_JSON
from ...formats.run_dir import SHAPES_CSV, TUNING_JSON
from ..defaults import LOSS_GAP
from ..logs.compare import LossComparison, compare_loss
from ..logs.model import LossLog
from ..logs.read import read_log, read_summary
from ..logs.throughput import RunThroughput, run_throughput, steps_warmup
from ..shapes import read_shapes_report
from ..traces.find import find_traces
from .alignment import Alignment, align
from .ranks import ranks_report


@dataclass(frozen=True)
class RunReport:
    """What the report shows about one run (and its baseline, when one is given)."""

    run: str
    log: LossLog
    summary: Optional[dict]
    throughput: RunThroughput
    comparison: Optional[LossComparison]
    tuning: Optional[dict]
    shapes: Optional[tuple]  # rows of shapes.csv (dicts); None without the file
    traces: tuple  # trace files under profile/
    advice: Any  # analysis.advisor.analyse.AdviceReport or None
    dump_steps: tuple  # step numbers with a precision dump
    overflows: tuple  # analysis.dumps.overflow.Overflow, ranked (the first is where the inf/nan started)
    notes: tuple = field(default=())
    alignment: Optional[Alignment] = None  # the reference's side, with a baseline
    replays: tuple = field(default=())  # analysis.dumps.replay.ReplayReport, by step then rank
    ranks: Any = None  # .ranks.RanksReport of a multi-rank run
    trace_comparison: Any = None  # analysis.traces.compare.TraceComparison: the baseline's traces vs the run's
    settings: Any = None  # analysis.experiment.compare.ConfigComparison: the two runs' config.json, or None

    @property
    def linked_steps(self) -> set:
        """Steps something in the report points at; their rows are always in the step table."""
        steps = set(self.dump_steps)
        steps.update(o.step for o in self.overflows if o.step is not None)
        steps.update(r.step for r in self.replays if r.step is not None)
        if self.advice is not None:
            steps.update(f.step for f in self.advice.findings if f.step is not None)
        if self.comparison is not None and self.comparison.max_rel_gap_step is not None:
            steps.add(self.comparison.max_rel_gap_step)
        return steps


def build_report(run: str, baseline: Optional[str] = None, threshold: float = LOSS_GAP, advise: bool = True,
                 baseline_reading: Optional[dict] = None, jobs: Optional[int] = None) -> RunReport:
    """Gather a run folder's outputs into a :class:`RunReport`.

    Parameters:
        run: the run's ``log_dir`` (holding log.txt / metrics.jsonl, and whatever else the monitor wrote).
        baseline: a reference run to compare the loss curve against: a folder or log file of any format
            :func:`~..logs.read.read_log` reads (a Hugging Face trainer_state.json, a Lightning metrics.csv, ...).
        threshold: the mean relative loss gap that counts as aligned.
        advise: run the trace advisor on the run's profiler traces.
        baseline_reading: how to read the baseline: ``format``, ``loss_key``, ``tag`` for ``read_log``.
        jobs: worker processes for the ranks of a multi-rank run (None: the CPU count).
    """
    if not os.path.isdir(run):
        raise InputError(f"{run} is not a folder; pass a run folder (TrainingMonitor's log_dir)")
    log = read_log(run)
    summary, problem = read_summary(run)
    if problem is not None:
        raise InputError(f"{problem}; was the run interrupted while writing it?")
    notes = list(log.notes())
    # the run's warm-up as summary.json and `ascend-tune perf` count it (analysis.logs.rates); none without one
    if log.warmup is not None:
        rates = run_throughput(log, log.warmup, "summary.json")
    else:
        rates = run_throughput(log, steps_warmup(log, 0))
    if rates.excluded >= log.lines:  # a short run: every line is warm-up, so the statistics take them all
        notes.append(f"all {log.lines} log lines fall in the {rates.warmup.steps}-step warm-up; "
                     "throughput is over all of them")
        rates = run_throughput(log, steps_warmup(log, 0))
    comparison = alignment = settings = None
    if baseline:
        from ..experiment.compare import compare_runs as compare_settings

        settings = compare_settings(baseline, run)
        reference = read_log(baseline, **(baseline_reading or {}))
        comparison = compare_loss(reference, log, threshold=threshold)
        alignment = align(run, baseline, reference, rates)
        if reference.loss_key is not None:
            key = reference.loss_key
            notes.append(f"baseline read as {reference.kind_name}, loss {key.name!r} "
                         f"({'guessed; --loss-key / --tag picks another' if key.guessed else 'as given'})")
    traces = _traces(os.path.join(run, "profile"))
    advice = None
    if advise and traces:
        from ..advisor.analyse import advise_traces

        try:
            advice = advise_traces(os.path.join(run, "profile"))
        except InputError as exc:
            notes.append(f"the advisor could not read the traces: {exc}")
    trace_comparison = None
    if baseline and traces:
        from .time_section import compare_runs

        trace_comparison = compare_runs(run, baseline, notes)
    dump_dir = os.path.join(run, "dump")
    dump_steps, overflows = _dumps(dump_dir) if os.path.isdir(dump_dir) else ((), ())
    replays = _replays(dump_dir, notes) if dump_steps else ()
    return RunReport(
        run=run, log=log, summary=summary, throughput=rates, comparison=comparison,
        tuning=_json_file(os.path.join(run, TUNING_JSON)), shapes=_shapes(os.path.join(run, SHAPES_CSV)),
        traces=tuple(traces), advice=advice, dump_steps=dump_steps, overflows=overflows, notes=tuple(notes),
        alignment=alignment,
        replays=replays, trace_comparison=trace_comparison, settings=settings,
        ranks=ranks_report(run, jobs),
    )


def _json_file(path: str) -> Optional[dict]:
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path} is not readable JSON ({exc}); was the run interrupted while writing it?") from None


def _shapes(path: str) -> Optional[tuple]:
    """The dynamic ops of shapes.csv (:class:`~ascend_tune.formats.shapes_csv.ShapeRow`); None when there is no
    such file (the detector was off)."""
    return read_shapes_report(path).dynamic if os.path.isfile(path) else None


def _traces(folder: str) -> list:
    return list(find_traces(folder)) if os.path.isdir(folder) else []


def _dumps(dump_dir: str) -> tuple:
    steps = sorted(int(n[4:]) for n in os.listdir(dump_dir) if n.startswith("step") and n[4:].isdigit())
    from ..dumps.overflow import find_overflows

    try:
        overflows = tuple(find_overflows(dump_dir)) if steps else ()
    except InputError:
        overflows = ()
    return tuple(steps), overflows



def _replays(dump_dir: str, notes: list) -> tuple:
    """The replayed steps under ``dump_dir`` (none when no step was replayed)."""
    from ..dumps.replay import replay_verdict

    if not any(n == REPLAY_JSON for _, _, names in os.walk(dump_dir) for n in names):
        return ()
    try:
        return replay_verdict(dump_dir).reports
    except InputError as exc:
        notes.append(f"the replay results could not be read: {exc}")
        return ()
