"""The advisor's rules, one module per family; :data:`RULES` is the one place a rule is added.

A rule is a function ``rule(trace: traces.model.Trace) -> list[findings.Finding]``. Thresholds follow
msprof-analyze's advisor where it has one (DataLoader 10 ms per step, 20 operator compilations, 20 SyncBatchNorm,
synchronize/launch ratio 0.5; notes/anchors-ascend.md §3) and are ours where it has none; each is a named constant
in its rule's module. The order below is the order findings of equal severity are reported in.
"""

from __future__ import annotations

from .compile import op_compile
from .dataloader import slow_dataloader
from .dispatch import dispatch_bound
from .optimizer import unfused_optimizer
from .shapes import dynamic_shapes
from .sync import host_syncs, launch_blocking, sync_batchnorm

RULES = (unfused_optimizer, dispatch_bound, slow_dataloader, dynamic_shapes, op_compile, host_syncs,
         sync_batchnorm, launch_blocking)

__all__ = ["RULES"]
