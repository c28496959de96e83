"""Rules ``host-sync``, ``sync-batchnorm`` and ``launch-blocking``: where the host waits for the device.

A sync is located by the Python frames around it (``with_stack=True``: kineto's ``python_function`` events, or
torch_npu's "Call stack" argument) or, without them, by the ops and annotations that enclose it. The monitor's own
loss read-back, one per log line by design, runs inside its annotation (``ascend_tune.loss_read_back#<k>``) and is
not a host sync to fix: it is left out, and named in the evidence when other syncs are reported.
"""

from __future__ import annotations

import re
from collections import defaultdict

from ....formats.trace_names import read_back_steps
from ...traces.model import Trace
from ...traces.vocabulary import is_dataloader, is_optimizer
from ..breakdown import device_reads, is_sync
from ..findings import Finding, median, step_label, step_windows

MAX_SYNCBN = 20  # msprof-analyze's max_syncbn_num
SYNC_LAUNCH_RATIO = 0.5  # msprof-analyze's min_co_occurrence_ratio
MIN_LAUNCHES = 20  # too few launches to judge the ratio

# -- syncs ------------------------------------------------------------------------------------------------------

_INTERNAL_FRAME = re.compile(r"(^|[/\\])(torch|site-packages|dist-packages|ascend_tune)[/\\]|^<built-in")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_STEP_NUMBER = re.compile(r"(?<=^ProfilerStep)#\d+$")  # one site across steps, not one per ProfilerStep#N


def host_syncs(trace: Trace) -> list:
    """``.item()``-style reads and stream synchronizes inside the step; the Python line that made them."""
    sites: dict = defaultdict(lambda: defaultdict(int))  # (what, where) -> step -> count
    monitor_reads: set = set()  # the log intervals of the monitor's own read-backs seen
    reads = device_reads(trace)
    for step, window in step_windows(trace):
        counted: set = set()
        for index in window:
            if not is_sync(trace, index):
                continue
            if reads is not None and trace.events[index].role == "host" and index not in reads:
                continue  # .item() of a host tensor: no copy from the device, nothing waited for
            names = [trace.events[p].name for p in trace.host_ancestors(index)]
            own = [read_back_steps(name) for name in names if read_back_steps(name) is not None]
            if own:
                monitor_reads.add(own[0])
                continue  # the monitor's one read-back per log line: by design, and it knows its interval
            if any(is_optimizer(name) or is_dataloader(name) for name in names):
                continue  # optimizer step counters and loader internals live on the host by design
            site = index
            for parent in trace.ancestors(index):
                if trace.events[parent].is_op:
                    site = parent
            if site in counted:
                continue
            counted.add(site)
            sites[(trace.events[site].name, _where(trace, site))][step.number] += 1
    if not sites:
        return []
    steps = [s.number for s in trace.steps]
    per_step = [sum(counts.get(n, 0) for counts in sites.values()) for n in steps]
    ranked = sorted(sites.items(), key=lambda kv: sum(kv[1].values()), reverse=True)
    (what, where), counts = ranked[0]
    first_step = min(counts)
    lines = [
        f"{op} ×{sum(c.values()) / len(steps):.1f} per step from {_user_frame(place) or ' ← '.join(place)}"
        for (op, place), c in ranked[:5]
    ]
    typical = median(per_step)
    evidence = (
        f"{typical:.0f} host sync{'' if typical == 1 else 's'} per step (median over {len(steps)} steps, "
        f"{max(per_step)} at most): "
        + "; ".join(lines) + ". Each one waits until the device has finished all queued work."
    )
    if trace.device == "cpu":
        evidence += " (Free on a CPU; on a GPU or NPU it stalls the launch queue.)"
    if not trace.has_stack:
        evidence += " The trace has no Python stack: profile with with_stack=True to see the line."
    if monitor_reads:
        every = ", ".join(str(k) for k in sorted(monitor_reads))
        evidence += (f" Not counted: ascend_tune's own loss read-back, one per log line (every {every} "
                     f"step{'' if every == '1' else 's'}).")
    return [Finding(
        rule="host-sync",
        severity="warning" if typical >= 1 else "info",
        title=f"Host syncs: {what} from {_user_frame(where) or 'the step'}",
        evidence=evidence,
        fix=(
            "# keep the running loss on the device and read it back every N steps\n"
            "running = running + loss.detach()\n"
            "if step % log_every == 0:\n"
            "    print((running / log_every).item())\n"
            "    running = torch.zeros((), device=loss.device)"
        ),
        trace=trace.name,
        step=first_step,
        where=where,
    )]


def _where(trace: Trace, index: int) -> tuple:
    """Innermost first: the builtin or op that synced, the user's frame that called it, and two of its callers."""
    frames = [_ADDRESS.sub("", frame) for frame in trace.python_stack(index)]
    if frames:
        user = [f for f in frames if not _INTERNAL_FRAME.search(f)]
        inner = frames[: frames.index(user[0])] if user else frames
        return tuple(inner[-1:] + user[:3])
    chain = [_STEP_NUMBER.sub("", trace.events[p].name) for p in trace.host_ancestors(index)]
    return tuple([trace.events[index].name] + chain[:3])


def _user_frame(where: tuple) -> str:
    return next((f for f in where if not _INTERNAL_FRAME.search(f) and "::" not in f), "")


def sync_batchnorm(trace: Trace) -> list:
    """More than 20 SyncBatchNorm calls per step: slow Python dispatch and a collective per layer."""
    records = []
    for step, window in step_windows(trace):
        hits = [i for i in window if trace.events[i].role == "host" and _is_syncbn(trace.events[i].name)]
        hits = [i for i in hits if not any(_is_syncbn(trace.events[p].name) for p in trace.host_ancestors(i))]
        records.append((step, hits))
    step, hits = max(records, key=lambda r: len(r[1]))
    if len(hits) <= MAX_SYNCBN:
        return []
    return [Finding(
        rule="sync-batchnorm",
        severity="warning",
        title=f"SyncBatchNorm: {len(hits)} calls per step",
        evidence=(
            f"{len(hits)} SyncBatchNorm calls in {step_label(step.number)} (msprof-analyze flags more than "
            f"{MAX_SYNCBN}); each one gathers statistics across ranks and dispatches several small ops."
        ),
        fix=(
            "# drop the conversion where the per-device batch is large enough for plain BatchNorm:\n"
            "# model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)\n"
            "# or on Ascend use the efficient forward msprof-analyze ships for torch_npu/utils/syncbatchnorm.py"
        ),
        trace=trace.name,
        step=step.number,
        where=_where(trace, hits[0]),
    )]


def _is_syncbn(name: str) -> bool:
    lowered = name.lower()
    return "syncbatchnorm" in lowered or "batch_norm_gather_stats" in lowered


def launch_blocking(trace: Trace) -> list:
    """``aclrtSynchronizeStream`` after most ``Node@launch``: ASCEND_LAUNCH_BLOCKING=1 left on."""
    syncs = sum(1 for e in trace.events if e.name.startswith("AscendCL@aclrtSynchronizeStream"))
    launches = sum(1 for e in trace.events if e.name.startswith("Node@launch"))
    if launches < MIN_LAUNCHES or syncs < SYNC_LAUNCH_RATIO * launches:
        return []
    return [Finding(
        rule="launch-blocking",
        severity="critical",
        title=f"Synchronous launches: {syncs} stream synchronizes for {launches} launches",
        evidence=(
            f"{syncs} AscendCL@aclrtSynchronizeStream and {launches} Node@launch events (ratio "
            f"{syncs / launches:.2f}, msprof-analyze flags ≥ {SYNC_LAUNCH_RATIO}): every op waits for the device."
        ),
        fix="unset ASCEND_LAUNCH_BLOCKING  # in the shell that starts training; or ASCEND_LAUNCH_BLOCKING=0",
        trace=trace.name,
    )]
