"""How the every-rank verdicts print: one line per (step, rank), then the run's one answer."""

from __future__ import annotations

from ..analysis.dumps.ranks import UNREADABLE, RankFinding, RunFindings
from ..analysis.logs.ranks import WaitVerdict
from ..analysis.traces.ranks import SlowRank


def findings_lines(found: RunFindings, written: tuple = ()) -> list:
    """compare-dump / overflow over a whole multi-rank location."""
    what = "compare-dump" if found.task == "compare" else "overflow"
    places = len({r.rank for r in found.ranks}), len({r.step for r in found.ranks})
    lines = [f"{what}: {' vs '.join(found.locations)}",
             f"  {len(found.ranks)} dump(s): {places[0]} rank(s) x {places[1]} step(s), {found.readable} readable, "
             f"{found.jobs} worker process(es)"]
    for r in found.ranks:
        lines.append(f"  {_place(r):<16} {_verdict(r)}")
    first = found.first
    if first is None:
        none = "no divergence on any rank" if found.task == "compare" else "no inf/NaN on any rank"
        lines.append(f"  first {'divergence' if found.task == 'compare' else 'inf/NaN'} of the run: none, {none}")
    else:
        lines.append(f"  first {'divergence' if found.task == 'compare' else 'inf/NaN'} of the run: rank {first.rank}, "
                     f"step {first.step}, {first.op}")
        lines.append(f"    why: {_why(first, found)}")
        lines += [f"    at: {f.partition(', ' + chr(10))[0].rstrip(', ')}" for f in first.stack[:3]]
    if written:
        lines.append(f"  wrote {', '.join(written)}")
    verdict = "PASS" if first is None else ("DIVERGED" if found.task == "compare" else "OVERFLOW")
    lines.append(f"  verdict: {verdict}")
    return lines


def unreadable_lines(found: RunFindings) -> list:
    """One line per dump that could not be read (printed on stderr)."""
    return [f"ascend-tune: {_place(r)}: {r.message}" for r in found.ranks if r.status == UNREADABLE]


def _place(r: RankFinding) -> str:
    return " ".join(p for p in ("" if r.rank is None else f"rank {r.rank}", "" if r.step is None else f"step {r.step}")
                    if p) or "."


def _verdict(r: RankFinding) -> str:
    if r.status == "agree":
        return f"agrees ({r.ops} ops)"
    if r.status == "clean":
        return f"no inf/NaN ({r.ops} calls)"
    if r.status in ("diverge", "overflow"):
        after = f", after {r.collectives_before} collective(s)" if r.collectives_before else ""
        return f"{'diverges' if r.status == 'diverge' else 'inf/NaN'} at {r.op} ({r.kind}{after})"
    if r.status == UNREADABLE:
        return "unreadable (see stderr)"
    return f"{r.status}: not compared"


def _why(first: RankFinding, found: RunFindings) -> str:
    others = [r for r in found.ranks if r.found and r is not first]
    when = ("before its first collective" if first.collectives_before == 0 else
            f"between its collectives {first.collectives_before} and {first.collectives_before + 1}")
    own = "its own" if not first.through_collective else "arrived through a collective"
    text = f"the earliest step with a finding; on rank {first.rank} {when} ({own}): {first.reason or first.kind}"
    if others:
        ranks = ", ".join(str(r) for r in sorted({r.rank for r in others if r.rank is not None}))
        text += f"; the {len(others)} other finding(s) (rank(s) {ranks}) come later in the run's order"
    return text


def wait_lines(verdict: WaitVerdict) -> list:
    """perf on a multi-rank run: each rank's host time per step, then the rank the others wait for."""
    lines = ["host time per step by rank (medians; backward holds the wait for the gradient all-reduce on CPU/gloo)",
             f"{'rank':>6} {'step ms':>9} {'data ms':>9} {'backward ms':>12} {'busy ms':>9}"]
    for r in verdict.ranks:
        mark = "  <- waited for" if r.rank == verdict.waited_for else ""
        lines.append(f"{r.rank:>6} {r.step * 1e3:>9.2f} {r.data * 1e3:>9.2f} {r.backward * 1e3:>12.2f} "
                     f"{r.busy * 1e3:>9.2f}{mark}")
    lines.append(f"  {verdict.answer()}")
    return lines



def slow_rank_lines(found: SlowRank) -> list:
    """perf on a multi-rank run with traces of every rank: per rank compute / communication / free, the answer."""
    lines = [f"traces by rank ({found.location}; ms summed over the profiled steps)",
             f"{'rank':>6} {'steps':>6} {'compute':>9} {'comm':>9} {'overlap':>9} {'free':>9} {'last':>5}"]
    for r in found.ranks:
        if r.error:
            lines.append(f"{r.rank:>6} unreadable: {r.error}")
            continue
        cells = " ".join(f"{r.total(f) / 1e3:>9.2f}" for f in ("compute", "communication", "overlapped", "free"))
        lines.append(f"{r.rank:>6} {len(r.steps):>6} {cells} {found.last.get(r.rank, 0):>5}")
    spread = ", ".join(f"{k} {v:.0%}" for k, v in found.spread.items())
    lines.append(f"  spread across ranks (max - min over mean; over 5% suggests a slow rank): {spread}")
    lines.append(f"  {found.answer()}")
    return lines
