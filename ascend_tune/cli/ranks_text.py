"""How the every-rank verdicts print: one line per (step, rank), then the run's one answer."""

from __future__ import annotations

from ..analysis.dumps.ranks import UNREADABLE, RankFinding, RunFindings


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
        lines += [f"    at: {f.splitlines()[0]}" for f in first.stack[:3]]
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
    others = sorted({r.rank for r in found.ranks if r.found and r is not first and r.rank is not None})
    when = ("before its first collective" if first.collectives_before == 0 else
            f"between its collectives {first.collectives_before} and {first.collectives_before + 1}")
    own = "its own" if not first.through_collective else "arrived through a collective"
    text = f"the earliest step with a finding; on rank {first.rank} {when} ({own}): {first.reason or first.kind}"
    if others:
        text += f"; rank(s) {', '.join(map(str, others))} follow from it or later"
    return text
