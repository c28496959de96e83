"""Per-module statistics at chosen steps: one line per module and step in ``health/modules.jsonl``.

The record (stable; ``ascend-tune health`` reads it):

``{"step", "rank", "module", "type", "grad_norm", "param_norm", "update_ratio", "act_mean", "act_std",
"act_absmax", "act_zero_frac", "act_nonfinite"}``

- ``grad_norm`` / ``param_norm``: 2-norms over the module's parameters (its submodules' included), the gradients as
  the optimizer is about to apply them (before ``clip_grad_norm_`` clips them, when the step calls it), the
  parameters before the step;
- ``update_ratio``: ``||param after - param before|| / ||param before||`` over the step;
- ``act_*``: the module's output (its first floating-point tensor) in the step's first call of the module: mean,
  standard deviation, largest absolute value, fraction of exact zeros, count of NaN / infinite elements.

A value that does not apply is null (a module without parameters, one not called in the step). Every statistic is
computed on the device as the step runs and read back once, at the step's end. Modules are seen through the
recording layer's global module hook (:func:`~ascend_tune.recording.modules.global_forward_hook`), installed for
the recorded steps only. Under FSDP2 the values are the rank's shards'.
"""

from __future__ import annotations

import contextlib
import fnmatch
import math
from typing import Any, Optional

import torch

from ..recording.frames import internal
from ..recording.modules import global_forward_hook

FIELDS = ("grad_norm", "param_norm", "update_ratio", "act_mean", "act_std", "act_absmax", "act_zero_frac",
          "act_nonfinite")


class ModuleStats:
    """The statistics of the targeted modules of ``models`` for one step at a time.

    Parameters:
        models: the ``nn.Module`` objects the monitor was given.
        targets: module name patterns (fnmatch); empty: every module that holds parameters of its own.
    """

    def __init__(self, models: tuple, targets: tuple = ()):
        self.modules: list = []  # (name, module)
        for model in models:
            for name, module in model.named_modules():
                own = next(module.parameters(recurse=False), None) is not None
                if (targets and any(fnmatch.fnmatchcase(name, t) for t in targets)) or (not targets and own):
                    self.modules.append((name or type(model).__name__, module))
        self._index = {id(m): i for i, (_, m) in enumerate(self.modules)}
        self._params = [list(m.parameters()) for _, m in self.modules]
        self._hook: Any = None
        self._acts: dict = {}
        self._grads: Optional[list] = None
        self._before: Optional[list] = None

    @property
    def recording(self) -> bool:
        return self._hook is not None

    def begin(self) -> None:
        """Start a recorded step: the module hook is on until :meth:`end`."""
        if self._hook is None and self.modules:
            self._acts, self._grads, self._before = {}, None, None
            self._hook = global_forward_hook(self._forward)

    def _forward(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        i = self._index.get(id(module))
        if i is None or i in self._acts:
            return
        tensor = _first_float(output)
        if tensor is None:
            return
        try:
            with internal(), torch.no_grad():
                self._acts[i] = activation_stats(tensor)
        except Exception:
            pass

    def before_step(self) -> None:
        """The optimizer is about to step: gradient and parameter norms, and the parameters as they were."""
        if self._hook is None or self._grads is not None:
            return
        with internal(), torch.no_grad():
            self._grads = [_norm([p.grad for p in ps if p.grad is not None]) for ps in self._params]
            self._before = [[p.detach().clone() for p in ps] for ps in self._params]

    def end(self, step: int, rank: int) -> list:
        """End the recorded step: its records (one read of every statistic), the hook removed."""
        hook, self._hook = self._hook, None
        if hook is None:
            return []
        hook.remove()
        with internal(), torch.no_grad():
            dev = next((p.device for ps in self._params for p in ps), torch.device("cpu"))
            nan = torch.full((), math.nan, device=dev)
            rows = []
            for i, ps in enumerate(self._params):
                before = self._before[i] if self._before is not None else None
                param = _norm(before) if before is not None else _norm([p.detach() for p in ps])
                grad = self._grads[i] if self._grads is not None else None
                update = None
                if before is not None and ps:
                    update = _norm([p.detach() - b for p, b in zip(ps, before)])
                ratio = update / param if update is not None and param is not None else None
                acts = self._acts.get(i)
                parts = [grad, param, ratio]
                rows.append(torch.stack([(nan if v is None else v.to(dev).float().reshape(())) for v in parts]
                                        + list(acts.to(dev).unbind() if acts is not None else [nan] * 5)))
            values = torch.stack(rows).tolist() if rows else []
        self._acts, self._grads, self._before = {}, None, None
        records = []
        for (name, module), row in zip(self.modules, values):
            record = {"step": step, "rank": rank, "module": name, "type": type(module).__name__}
            record.update({k: (None if math.isnan(v) else v) for k, v in zip(FIELDS, row)})
            if record["act_nonfinite"] is not None:
                record["act_nonfinite"] = int(record["act_nonfinite"])
            records.append(record)
        return records

    def close(self) -> None:
        """Remove the hook if a recorded step is under way (the block ends)."""
        hook, self._hook = self._hook, None
        if hook is not None:
            with contextlib.suppress(Exception):
                hook.remove()


def activation_stats(tensor: torch.Tensor) -> torch.Tensor:
    """[mean, std, absmax, zero fraction, non-finite count] of a tensor, on its device (float32), in few passes."""
    x = tensor.detach()
    if x.numel() == 0:
        return torch.full((5,), math.nan, device=x.device)
    xf = x.float()
    n = x.numel()
    mean = xf.mean()
    # std from the mean square (torch.std_mean's Welford pass is 2-3x slower on a CPU); for the eye, not a test
    std = (torch.linalg.vector_norm(xf).square() / n - mean.square()).clamp_min(0).sqrt()
    low, high = torch.aminmax(xf)
    zeros = torch.count_nonzero(x == 0)
    nonfinite = n - torch.count_nonzero(torch.isfinite(x))
    return torch.stack([mean, std, torch.maximum(high, -low), zeros.float() / n, nonfinite.float()])


def _norm(tensors: list) -> Optional[torch.Tensor]:
    if not tensors:
        return None
    tensors = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]
    dev = tensors[0].device
    try:
        norms = torch._foreach_norm(tensors)
    except Exception:  # mixed devices or dtypes: one by one
        norms = [torch.linalg.vector_norm(t) for t in tensors]
    return torch.linalg.vector_norm(torch.stack([n.float().to(dev) for n in norms]))


def _first_float(output: Any) -> Optional[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return output if output.is_floating_point() else None
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        for item in output:
            found = _first_float(item)
            if found is not None:
                return found
    return None
