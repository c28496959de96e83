"""THE names a profiler trace is read with, shared by the advisor, compare-trace and perf: the step's parts as they
are named everywhere (``host sync``, ``data loading``, ``optimizer``, ``backward``), what counts as a host sync, the
loader's and the optimizer's annotations, the collectives (device kernels and host annotations), and the kinds a
step's time is split into.

:data:`KINDS` is the one table of step kinds: each kind, where it is measured and the rule that gives an event that
kind, in the order the rules are tried (the first match wins). Context kinds (a host sync, the DataLoader, the
optimizer step) win over compute kinds because they say why the time was spent: an ``aten::mul_`` inside
``Optimizer.step#...`` is optimizer time. On a trace with a device timeline (CUDA kernels, Ascend Hardware tasks)
the compute kinds are measured on the device (the union of its tasks per kind) and the device's idle time is split
by what the host was doing meanwhile; on a CPU trace the same kinds are the host ops' self time. Either way a step's
kinds add up to its wall time.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple, Optional

HOST_SYNC, DATA, OPTIMIZER, BACKWARD = "host sync", "data loading", "optimizer", "backward"

# the ops that read a value back to the host (``.item()``, ``float(t)``), and any synchronize call of a runtime
# (cudaStreamSynchronize, cudaDeviceSynchronize, aclrtSynchronizeStream...): the host waits for the device
SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::item"})
SYNCHRONIZE = re.compile(r"Synchronize", re.IGNORECASE)
# a collective by name: the host annotations of the process groups (``gloo:all_reduce``, ``nccl:all_reduce``,
# torch's ``record_param_comms``), c10d's ops, the NCCL / HCCL kernels (``ncclKernel...``, ``hcom_allReduce_``)
COLLECTIVE = re.compile(
    r"^(gloo|nccl|hccl|mpi|ucc):|^c10d::|nccl|hccl|^hcom_|allreduce|all_reduce|allgather|all_gather|reduce_?scatter|"
    r"alltoall|all_to_all|broadcast|record_param_comms", re.IGNORECASE)
# the host annotation that spans a collective's wait, where there is no device timeline to read it from
HOST_COLLECTIVE = re.compile(r"^(gloo|nccl|hccl|mpi|ucc):|^record_param_comms$")


def is_sync_op(name: str) -> bool:
    """An op or runtime call in which the host waits for the device."""
    return name in SYNC_OPS or bool(SYNCHRONIZE.search(name))


def is_dataloader(name: str) -> bool:
    """``enumerate(DataLoader)#..._next__`` and torch_npu's equivalents (msprof-analyze matches "dataloader")."""
    return "dataloader" in name.lower()


def is_optimizer(name: str) -> bool:
    """The annotations torch.optim records around ``step()`` and ``zero_grad()``."""
    return name.startswith(("Optimizer.step#", "Optimizer.zero_grad#"))


def is_backward(name: str) -> bool:
    """The autograd engine's evaluation of a backward node."""
    return name.startswith("autograd::engine::evaluate_function")


class Kind(NamedTuple):
    """One row of :data:`KINDS`: the kind's name, where it is measured and the names that match it."""

    name: str
    side: str  # "compute" (device tasks, or host ops without a device timeline), "context" (host), "rest"
    rule: str  # the rule in words (docs/traces.md shows this table)
    pattern: Optional[re.Pattern]  # matched against the op or kernel name (case-insensitive); None: by context


def _names(*words: str) -> re.Pattern:
    return re.compile("|".join(words), re.IGNORECASE)


OUTSIDE, IDLE = "outside any op", "device idle"

KINDS = (
    Kind(HOST_SYNC, "context", "aten::item / aten::_local_scalar_dense, or a synchronize call (the host waits); "
         "with the Python between two such calls that have no other op between them (a read-back loop)", None),
    Kind(DATA, "context", "inside enumerate(DataLoader)#... (the next batch)", None),
    Kind(OPTIMIZER, "context", "inside Optimizer.step#... / Optimizer.zero_grad#..., or a fused optimizer kernel",
         _names(r"_fused_adam", r"_fused_sgd", r"fused_?adam", r"apply_adam", r"multi_tensor_apply",
                r"ApplyAdam")),
    Kind("communication", "compute", "c10d:: / nccl / hccl / allreduce / allgather / reducescatter / broadcast",
         COLLECTIVE),
    Kind("memory copy", "compute", "copies and fills: aten::copy_ / to / clone / contiguous / fill_, Memcpy, "
         "Memset", _names(r"^aten::(copy_|_to_copy|to|clone|contiguous|fill_|zero_|zeros?|empty\w*)$", r"memcpy",
                          r"memset")),
    Kind("attention", "compute", "scaled_dot_product_attention, flash / fusion attention kernels",
         _names(r"attention", r"flash", r"\bfmha", r"sdpa")),
    Kind("matmul / conv", "compute", "mm / addmm / bmm / matmul / linear / conv*, gemm and cube kernels",
         _names(r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_?convolution\w*|conv\w*|mkldnn_convolution\w*|"
                r"\w*conv\w*_backward\w*)$", r"gemm", r"sgemm", r"cutlass", r"matmul", r"\bconv", r"cudnn",
                r"MatMul", r"Conv2D", r"BatchMatMul")),
    Kind("norm", "compute", "layer / batch / group / rms norm, forward and backward",
         _names(r"norm")),
    Kind("elementwise / vector", "compute", "any other aten:: / npu:: op or kernel (activations, adds, "
         "reductions, softmax, losses)", _names(r"^\w+::", r".")),
    Kind(OUTSIDE, "rest", "no op running on the host: Python between ops, waits outside the profiler's view",
         None),
    Kind(IDLE, "rest", "(device timeline only) the device ran nothing while the host was inside an op: dispatch "
         "and launch cost", None),
)
KIND_NAMES = tuple(k.name for k in KINDS)
COMPUTE_KINDS = tuple(k for k in KINDS if k.side == "compute")


@functools.lru_cache(maxsize=4096)
def context_kind(name: str) -> Optional[str]:
    """The context kind an annotation or op name opens (``host sync``, ``data loading``, ``optimizer``), or None."""
    if is_sync_op(name):
        return HOST_SYNC
    if is_dataloader(name):
        return DATA
    if is_optimizer(name):
        return OPTIMIZER
    return None


@functools.lru_cache(maxsize=4096)
def compute_kind(name: str) -> str:
    """The compute kind of an op or device task name (the first rule of :data:`KINDS` that matches)."""
    for kind in KINDS:
        if kind.pattern is not None and kind.pattern.search(name):
            return kind.name
    return "elementwise / vector"
