"""The advisor's rules, one module per family; :data:`RULES` is the one place a rule is added, and
:func:`first_fix` the one entry other rooms use (compare-trace's next action).

A rule is a function ``rule(trace: traces.model.Trace) -> list[findings.Finding]``. Thresholds follow
msprof-analyze's advisor where it has one (DataLoader 10 ms per step, 20 operator compilations, 20 SyncBatchNorm,
synchronize/launch ratio 0.5; notes/anchors-ascend.md §3) and are ours where it has none; each is a named constant
in its rule's module. The order below is the order findings of equal severity are reported in.
"""

from __future__ import annotations

from typing import Optional

from ...traces.model import Trace
from ...traces.vocabulary import DATA, HOST_SYNC, OPTIMIZER
from .compile import op_compile
from .dataloader import slow_dataloader
from .dispatch import dispatch_bound
from .optimizer import unfused_optimizer
from .shapes import dynamic_shapes
from .sync import host_syncs, launch_blocking, sync_batchnorm

RULES = (unfused_optimizer, dispatch_bound, slow_dataloader, dynamic_shapes, op_compile, host_syncs,
         sync_batchnorm, launch_blocking)

# the rule that says why a step kind grew, tried first when that kind is what grew most
RULE_OF_KIND = {OPTIMIZER: unfused_optimizer, HOST_SYNC: host_syncs, DATA: slow_dataloader}


def first_fix(trace: Trace, kind: Optional[str] = None):
    """The first finding above info on ``trace`` of the rule for ``kind`` (:data:`RULE_OF_KIND`), then of the
    rules that explain time anywhere (dispatch-bound small ops, dynamic shapes); None when none applies."""
    rules = [RULE_OF_KIND[kind]] if kind in RULE_OF_KIND else []
    for rule in rules + [dispatch_bound, dynamic_shapes]:
        findings = [f for f in rule(trace) if f.severity != "info"]
        if findings:
            return findings[0]
    return None


__all__ = ["RULES", "RULE_OF_KIND", "first_fix"]
