"""THE names a profiler trace is read with, shared by the advisor, compare-trace and perf: the step's parts as they
are named everywhere (``host sync``, ``data loading``, ``optimizer``, ``backward``), what counts as a host sync, the
loader's and the optimizer's annotations, and the collectives (device kernels and host annotations)."""

from __future__ import annotations

import re

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
