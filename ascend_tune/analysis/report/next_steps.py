"""What to do next, one line per report section, read from what the report found.

Every section of the page ends with one of these: a fix to apply, the evidence to read next, or that nothing there
needs doing (and what would tell more). They read the :class:`~.build.RunReport` only, no files.
"""

from __future__ import annotations

from typing import Optional

from .build import RunReport

DUMP_BOTH = "precision=dict(task='statistics', steps=[0])"


def first_divergence(report: RunReport) -> Optional[object]:
    """The first op where the two runs' dumps disagree, or None (no baseline, no dumps, or they agree)."""
    dumps = report.alignment.dumps if report.alignment is not None else None
    return dumps.comparison.first if dumps is not None and dumps.comparison is not None else None


def _dumps_compared(report: RunReport) -> bool:
    dumps = report.alignment.dumps if report.alignment is not None else None
    return dumps is not None and dumps.comparison is not None


def settings(report: RunReport) -> str:
    errors = report.settings.beyond_precision()
    if errors:
        return (f"make {errors[0].key} the same in both runs (ascend-tune compare-config lists every difference), "
                "then compare again: no op is worth chasing before")
    return "the same settings: a gap below comes from the device, the kernels or the dtype"


def verdict(report: RunReport) -> str:
    c, a = report.comparison, report.alignment
    first = first_divergence(report)
    if report.settings is not None and report.settings.beyond_precision():
        return (f"the runs are not the same experiment ({report.settings.beyond_precision()[0].key} differs): make "
                "the settings the same before any dump or op")
    if c is not None and c.aligned and c.beyond_noise:
        return ("the loss gap is under 5% but persists beyond the runs' own noise: compare the two runs' settings "
                "(learning rate, schedule, weight decay, seeds) before any op")
    if c is not None and not c.aligned:
        if first is not None:
            return f"the loss is off: start at {first.op}, the first op the dumps disagree on"
        return "the loss is off: dump one step in both runs to find the first op that differs"
    if a.speed is not None and a.speed.slower:
        worth = [f for f in report.advice.findings if f.severity != "info"] if report.advice is not None else []
        if worth:
            return f"the loss agrees and this run is slower: apply the advisor's first finding ({worth[0].title})"
        if report.traces:
            return "the loss agrees and this run is slower: read where the time goes, below"
        return "the loss agrees and this run is slower: profile it (profile=True) and apply the advisor's findings"
    if a.speed is not None and not a.speed.known and a.speed.ratio < 1:
        return "the loss agrees; log more steps to tell whether this run is slower (under 3 steady log lines)"
    return "the two runs agree and this one is as fast within the runs' own scatter: nothing to fix"


def run(report: RunReport) -> str:
    s = report.summary or {}
    if s.get("nonfinite_steps"):
        return "the loss went inf/nan: precision=dict(task='overflow_check', steps=[]) names the first op that made it"
    if report.alignment is None:
        return ("train the reference (GPU / CPU) with the same two lines and compare: "
                "ascend-tune report RUN --baseline REFERENCE")
    return "the sections below compare this run with the reference step by step, from the loss down to single ops"


def loss(report: RunReport) -> str:
    if report.comparison.agrees:
        return "the loss curves agree; go on to speed"
    if report.comparison.aligned:
        return "the gap persists beyond the runs' own noise: compare the runs' settings, then dump one step in both"
    if _dumps_compared(report):
        return "find where the runs part: read the first divergence of the step both runs dumped, below"
    return f"find where the runs part: dump one step in both runs ({DUMP_BOTH}) and read the first divergence"


def throughput(report: RunReport) -> str:
    a = report.alignment
    slow = a is not None and a.speed is not None and a.speed.slower
    if slow:
        return "read the advisor's findings below" if report.traces else \
            "profile this run (profile=True) to see where its steps go"
    if a is not None and a.speed is not None:
        return "this run is as fast as the reference within the runs' own scatter: nothing to do for speed"
    if report.traces:
        return "read the advisor's findings below for what would make the steps faster"
    return "set these steps/sec beside the reference's: ascend-tune perf RUN REFERENCE"


def divergence(report: RunReport) -> str:
    dumps = report.alignment.dumps
    if dumps is None:
        return f"dump the same step in both runs: {DUMP_BOTH}"
    if dumps.comparison is None:
        return "dump the same step in both runs"
    first = dumps.comparison.first
    if first is None:
        mixed = dumps.comparison.mixed_precision()
        within = f" within {mixed[1]}'s precision" if mixed else ""
        if dumps.comparison.uncertain and dumps.comparison.mode == "statistics":
            return (f"no op of the dumped step diverges{within}; to decide the uncertain op(s), dump that step with "
                    "task='tensor' in both runs and run ascend-tune compare-dump")
        return f"the dumped step agrees op by op{within}; if the loss still parts, dump a later step"
    return (f"read {first.op} at its first user frame; for tensor-level metrics dump that step with task='tensor' in "
            "both runs and run ascend-tune compare-dump")


def advice(report: RunReport) -> str:
    if not report.traces:
        return "profile=True traces a few steps and runs the advisor on them"
    worth = [f for f in report.advice.findings if f.severity != "info"] if report.advice is not None else []
    if worth:
        return f"apply the fix of the first finding ({worth[0].title}) and measure again"
    if report.advice is not None and report.advice.findings:
        return f"nothing slows the steps much; the first note is worth a look: {report.advice.findings[0].title}"
    return "nothing to change in the traced steps"


def tuning(report: RunReport) -> str:
    if not report.tuning:
        return "leave tune on (the default) to record what it would change"
    optimizer = report.tuning.get("optimizer")
    reported = isinstance(optimizer, dict) and optimizer.get("action") == "reported"
    if reported and optimizer.get("would_run") not in (None, optimizer.get("variant")):
        reason = str(optimizer.get("reason", ""))
        mode = "force" if "set explicitly" in reason else "swap"  # a flag the user gave is kept by 'swap'
        return (f"{optimizer.get('optimizer', 'the optimizer')} steps faster as {optimizer['would_run']} "
                f"({reason.split(':')[0]}): build it so, or let the monitor switch it with "
                f"tune=dict(optimizer='{mode}')")
    return "nothing to apply: tune made or recorded every change it found"


def shapes(report: RunReport) -> str:
    if report.shapes is None:
        return "shapes=True lists ops whose shapes change per step"
    if report.shapes:
        return "pad the listed ops' inputs to fixed lengths or buckets"
    return "no op recompiles for new shapes: nothing to pad"


def dumps(report: RunReport) -> str:
    if report.overflows:
        return "look at the first op that made the inf/nan, at its line"
    if not report.dump_steps:
        return f"{DUMP_BOTH} dumps a step to compare with the reference or to check for inf/nan"
    return "no inf/nan at the dumped steps: nothing to chase there"


def replay(report: RunReport) -> str:
    if any(r.suspects for r in report.replays):
        return "read the first suspect's line: that call's kernel computes wrongly on this device"
    if report.comparison is None or report.comparison.aligned:
        return "no kernel computes wrongly at the replayed steps: nothing to fix there"
    first = first_divergence(report)
    dumps = report.alignment.dumps if report.alignment is not None else None
    mixed = dumps.comparison.mixed_precision() if dumps is not None and dumps.comparison is not None else None
    if first is None and mixed:
        return (f"no kernel computes wrongly for its dtype and the dumped step agrees within {mixed[1]}'s precision: "
                f"the runs part over the later steps, through their settings or {mixed[1]}'s rounding compounding; "
                f"compare the runs' settings, then train the reference in {mixed[1]} to see whether the gap closes")
    return ("no kernel computes wrongly at the replayed steps: the gap comes from what the runs do differently "
            "(data, settings, the calls the replay skipped)")
