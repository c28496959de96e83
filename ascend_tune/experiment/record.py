"""What config.json holds: each section read from the objects the user already has, plain JSON values.

Sections (``ascend-tune compare-config`` compares them, docs/cli.md):

- ``optimizer`` (``optimizers`` by name for several): the class and every param group's hyperparameters (all of
  its keys but the parameters themselves) with its parameter count and size; a scheduler leaves ``initial_lr``;
- ``schedulers``: each LR scheduler of the optimizer(s) (found among what the running frames hold: the script's, a
  Trainer's, Lightning's): its class and settings, its schedule function named (a ``functools.partial``'s function
  and arguments: the HF Trainer's warm-up and length), a chained one's parts;
- ``clipping``: the ``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_`` calls of the first steps;
  ``accumulation``: the backwards of each of the first steps (gradient accumulation); ``grad_scaler``: a
  GradScaler's settings;
- ``precision``: autocast per device type during the first forward (enabled, dtype), the parameters' dtypes,
  ``torch.get_float32_matmul_precision()``, the TF32 / cudnn flags, deterministic algorithms, torch_npu's HF32
  switches where it is there;
- ``model``: a fingerprint of the module tree (each module's class and each parameter's name, shape and dtype),
  the dropout rates, train / eval mode, the parameter count;
- ``weights``: per parameter its mean, standard deviation, largest magnitude, max, min and norm at the first step's
  start, and the sum over the model (computed on the device, read back without a sync: :class:`DeviceRead`);
- ``data``: the loader's batch size, sampler, shuffle, drop_last, workers, its generator's seed, and the first
  forward calls' tensor arguments as statistics (shape, dtype, sum, mean of squares): another order or augmentation
  shows, no bytes are kept;
- ``randomness``: ``torch.initial_seed()``, and a digest of numpy's and Python's global random state at the
  block's start (the seed itself cannot be read back; two runs seeded alike and drawing alike have one digest);
- ``environment``: python, the versions of the libraries the process has imported, and the values of
  :data:`VARIABLES` (a fixed allow-list: never tokens, keys or paths of the environment).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import math
import os
import platform
import random
import sys
import types
from typing import Any, Optional

import torch

from ..device import new_event
from ..formats.config_json import LIBRARIES, MODULES, VARIABLES


def section(read: Any, *args: Any) -> Any:
    """``read(*args)``, or ``{"unreadable": reason}`` when it raises: a section that cannot be read costs itself."""
    try:
        return read(*args)
    except Exception as exc:  # noqa: BLE001 - whatever a user's object does, the run goes on
        return {"unreadable": f"{type(exc).__name__}: {exc}"[:200]}


def plain(value: Any) -> Any:
    """``value`` as JSON: numbers, strings, bools, None, lists and dicts of them; a tensor's number, else its text."""
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, torch.Tensor):
        return plain(value.detach().cpu().item()) if value.numel() == 1 else f"tensor{list(value.shape)}"
    if isinstance(value, torch.dtype):
        return str(value).replace("torch.", "")
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return type(value).__name__ if callable(value) else str(value)


def optimizers(optimizer: Any) -> dict:
    """``{"optimizer": ...}`` of one optimizer, ``{"optimizers": {name: ...}}`` of a list or dict of them."""
    if isinstance(optimizer, dict):
        return {"optimizers": {str(k): optimizer_of(v) for k, v in optimizer.items()}}
    if isinstance(optimizer, (list, tuple)):
        return {"optimizers": {f"{i}.{type(o).__name__}": optimizer_of(o) for i, o in enumerate(optimizer)}}
    return {"optimizer": optimizer_of(optimizer)} if optimizer is not None else {}


def optimizer_of(optimizer: Any) -> dict:
    """The class and every param group's settings of one optimizer."""
    groups = []
    for group in getattr(optimizer, "param_groups", ()):
        params = group.get("params", ())
        entry = {k: plain(v) for k, v in sorted(group.items()) if k != "params"}
        entry["parameters"] = len(params)
        entry["numel"] = int(sum(p.numel() for p in params))
        groups.append(entry)
    return {"class": type(optimizer).__name__, "param_groups": groups}


SCHEDULER_MARKS = ("base_lrs", "min_lrs", "_schedulers")  # an LR scheduler, a plateau one, a chained one
SCHEDULER_PROGRESS = ("last_epoch", "best", "num_bad_epochs", "cooldown_counter", "optimizer", "verbose")
"""A scheduler's attributes that are its progress or its links, not its settings (left out of config.json)."""


FRAMES, DEPTH, VISITS = 64, 4, 4000  # how far the scheduler search looks from the running frames


def schedulers_near(optimizers: list, frame: Any) -> list:
    """The LR schedulers that drive ``optimizers`` (or an optimizer wrapping one: accelerate's, which the HF
    Trainer's schedule holds) among what the running frames hold: the locals of ``frame`` and of up to
    :data:`FRAMES` callers, and what those hold, :data:`DEPTH` attributes or items deep, at most :data:`VISITS`
    objects (a script's scheduler, a Trainer's ``lr_scheduler``, Lightning's scheduler configs), never into a
    tensor or a module. A scheduler is what has an ``optimizer``, a ``step`` and ``base_lrs`` (plateau:
    ``min_lrs``, chained: ``_schedulers``). Microseconds to a millisecond, once."""
    wanted = {id(o) for o in optimizers}
    found: list = []
    seen: set = set()
    level = []
    while frame is not None and len(level) < FRAMES * 8:
        level += list(frame.f_locals.values())
        frame = frame.f_back
    for _ in range(DEPTH + 1):
        below = []
        for obj in level:
            if id(obj) in seen or len(seen) >= VISITS or isinstance(obj, _OPAQUE) or callable(obj):
                continue
            seen.add(id(obj))
            # the instance's own attributes only: a property of a user's object is never run by this walk
            attributes = _attributes(obj)
            owner = attributes.get("optimizer")
            if (id(owner) in wanted or id(_attributes(owner).get("optimizer")) in wanted) and \
                    any(k in attributes for k in SCHEDULER_MARKS):
                found.append(obj)
                continue
            below += _held(obj, attributes)
        level = below
    # a chained scheduler's parts drive the optimizer too: they are recorded inside it, not again
    parts = {id(p) for s in found for p in getattr(s, "_schedulers", ())}
    recorded = [scheduler_of(s) for s in found if id(s) not in parts]
    return sorted(recorded, key=lambda r: (r["class"], repr(r)))  # the order they were met in is no setting


_OPAQUE = (str, bytes, int, float, complex, bool, type(None), torch.Tensor, torch.nn.Module, type, types.ModuleType)


def _attributes(obj: Any) -> dict:
    """``obj``'s instance ``__dict__`` (empty where it has none)."""
    try:
        found = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return {}
    return found if isinstance(found, dict) else {}


def _held(obj: Any, attributes: dict) -> list:
    """What ``obj`` holds one level down: a container's items, an object's attributes (the first 64)."""
    if isinstance(obj, dict):
        return list(obj.values())[:64]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)[:64]
    return list(attributes.values())[:64]


def scheduler_of(scheduler: Any) -> dict:
    """A scheduler's class and settings (its public attributes but its progress), schedule functions named."""
    out: dict = {"class": type(scheduler).__name__}
    for key, value in sorted(vars(scheduler).items()):
        if key.startswith("_") or key in SCHEDULER_PROGRESS:
            continue
        out[key] = [callable_of(f) for f in value] if key == "lr_lambdas" else (
            callable_of(value) if callable(value) and not isinstance(value, torch.Tensor) else plain(value))
    parts = getattr(scheduler, "_schedulers", None)
    if parts:
        out["schedulers"] = [scheduler_of(p) for p in parts]
    milestones = getattr(scheduler, "_milestones", None)
    if milestones is not None:
        out["milestones"] = plain(list(milestones))
    return out


def callable_of(fn: Any) -> Any:
    """A schedule function as JSON: its qualified name, a partial's arguments, a lambda's code digest (another
    constant in the same lambda shows)."""
    if fn is None:
        return None
    if isinstance(fn, functools.partial):
        return {"function": callable_of(fn.func), "args": plain(list(fn.args)), "keywords": plain(fn.keywords)}
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", type(fn).__name__)
    if code is None:
        return {"object": type(fn).__name__, **{k: plain(v) for k, v in sorted(vars(fn).items())
                                              if not k.startswith("_")}} if hasattr(fn, "__dict__") else name
    digest = hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest()[:12]
    return {"function": name, "code": digest}


def random_states() -> dict:
    """``torch.initial_seed()`` and a digest of numpy's (when imported) and Python's global random state."""
    out: dict = {"torch_initial_seed": torch.initial_seed(),
                 "python_random_state": hashlib.sha256(repr(random.getstate()).encode()).hexdigest()[:16]}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        kind, keys, pos, *_ = numpy.random.get_state()
        out["numpy_random_state"] = hashlib.sha256(keys.tobytes() + str(pos).encode()).hexdigest()[:16]
    return out


def grad_scaler(scaler: Any) -> Optional[dict]:
    if scaler is None or not hasattr(scaler, "is_enabled"):
        return None
    return {"class": type(scaler).__name__, "enabled": scaler.is_enabled(),
            **{k: plain(getattr(scaler, f"_{k}", None)) for k in ("init_scale", "growth_factor", "backoff_factor",
                                                                   "growth_interval")}}


def precision_flags() -> dict:
    """The process-wide switches that change matmul and convolution numbers, and determinism."""
    flags: dict = {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
    }
    npu = getattr(torch, "npu", None)
    conv = getattr(getattr(npu, "conv", None), "allow_hf32", None)
    matmul = getattr(getattr(npu, "matmul", None), "allow_hf32", None)
    if conv is not None or matmul is not None:
        flags["npu_conv_allow_hf32"], flags["npu_matmul_allow_hf32"] = plain(conv), plain(matmul)
    return flags


def autocast_now() -> dict:
    """Autocast of each device type at this moment (inside the first forward): enabled, and its dtype when it is."""
    out = {}
    for device in ("cpu", "cuda", "npu"):
        try:
            enabled = torch.is_autocast_enabled(device)
        except (TypeError, RuntimeError):  # torch 2.1: no device argument; cuda's is the plain call
            enabled = {"cpu": torch.is_autocast_cpu_enabled, "cuda": torch.is_autocast_enabled}.get(
                device, lambda: False)()
        entry: dict = {"enabled": bool(enabled)}
        if enabled:
            get = getattr(torch, "get_autocast_dtype", None)
            dtype = get(device) if get is not None else (
                torch.get_autocast_cpu_dtype() if device == "cpu" else torch.get_autocast_gpu_dtype())
            entry["dtype"] = plain(dtype)
        out[device] = entry
    return out


def model_of(models: tuple) -> dict:
    """The module tree's fingerprint, dropout rates, mode, parameter count and dtypes of the models."""
    digest = hashlib.sha256()
    dropout: dict = {}
    dtypes: dict = {}
    count = numel = 0
    training = []
    for m, model in enumerate(models):
        training.append(bool(model.training))
        for name, module in model.named_modules():
            digest.update(f"{m}:{name}:{type(module).__name__};".encode())
            p = getattr(module, "p", None)
            if isinstance(module, torch.nn.modules.dropout._DropoutNd) and isinstance(p, float):
                dropout[name or type(module).__name__] = p
        for name, param in model.named_parameters():
            digest.update(f"{m}:{name}:{list(param.shape)}:{param.dtype};".encode())
            count += 1
            numel += param.numel()
            key = plain(param.dtype)
            dtypes[key] = dtypes.get(key, 0) + 1
    return {"fingerprint": digest.hexdigest()[:16], "dropout": dropout, "training": training, "parameters": count,
            "numel": numel, "param_dtypes": dtypes}


def weight_statistics(models: tuple) -> tuple:
    """(names, a tensor of rows): each parameter's mean, std, largest magnitude, sum, max, min and norm, in float64
    on its device (the statistics msprobe's config_check packs, beside ours); read them with :class:`DeviceRead`,
    turn them into config.json's ``weights`` with :func:`weights_from`."""
    names, stats = [], []
    with torch.no_grad():
        for m, model in enumerate(models):
            for name, param in model.named_parameters():
                if not param.numel():
                    continue
                x = param.detach().double()
                names.append(f"{m}.{name}" if len(models) > 1 else name)
                std = x.std() if x.numel() > 1 else torch.zeros((), dtype=torch.float64, device=x.device)
                low, high = torch.aminmax(x)
                stats.append(torch.stack([x.mean(), std, torch.maximum(-low, high), x.sum(), high, low,
                                          (x * x).sum()]))  # the norm's square: its root on the host
        return names, _rows(stats)


def weights_from(names: list, rows: list) -> dict:
    """config.json's ``weights`` from :func:`weight_statistics`' rows: each parameter's statistics and their sum."""
    if not names:
        return {}
    per = {n: dict(zip(WEIGHT_STATISTICS, v[:3] + v[4:6] + [math.sqrt(v[6])])) for n, v in zip(names, rows)}
    return {"sum": sum(v[3] for v in rows), "per_parameter": per}


WEIGHT_STATISTICS = ("mean", "std", "absmax", "max", "min", "norm")
TENSOR_STATISTICS = ("sum", "mean_square", "mean", "max", "min", "norm")


def _rows(stats: list) -> Optional[torch.Tensor]:
    """The 1-D ``stats`` (on any devices) as one 2-D tensor on the first one's device, or None when none."""
    if not stats:
        return None
    device = stats[0].device
    return torch.stack([s.to(device) for s in stats])


class DeviceRead:
    """Device values on their way to the host with no sync: on an accelerator a non-blocking copy into pinned memory
    and an event (:func:`~ascend_tune.device.new_event`), asked with :meth:`ready` at a later step; on the CPU (or a
    device with no event API) read where they lie."""

    def __init__(self, rows: Optional[torch.Tensor]):
        self._event: Any = None
        self._host = rows
        if rows is None or rows.is_cpu:
            return
        event = new_event(rows.device.type)
        if event is None:
            return
        self._host = torch.empty(rows.shape, dtype=rows.dtype, pin_memory=True)
        self._host.copy_(rows, non_blocking=True)
        event.record()
        self._event = event

    def ready(self) -> bool:
        """Whether the values are on the host (never blocks)."""
        return self._event is None or bool(self._event.query())

    def values(self) -> list:
        """The rows as lists of floats (waits for the copy where it is not done: the block's end only)."""
        if self._event is not None:
            self._event.synchronize()
        return [] if self._host is None else self._host.tolist()


def loader_of(loader: Any) -> dict:
    """A DataLoader's batching and order: batch size, sampler, shuffle, workers, its generator's seed."""
    if loader is None:
        return {}
    sampler = getattr(loader, "sampler", None)
    generator = getattr(loader, "generator", None) or getattr(sampler, "generator", None)
    out = {
        "class": type(loader).__name__,
        "batch_size": plain(getattr(loader, "batch_size", None)),
        "sampler": type(sampler).__name__ if sampler is not None else None,
        "shuffle": isinstance(sampler, torch.utils.data.RandomSampler),
        "drop_last": plain(getattr(loader, "drop_last", None)),
        "num_workers": plain(getattr(loader, "num_workers", None)),
    }
    if isinstance(generator, torch.Generator):
        out["generator_seed"] = generator.initial_seed()
    return out


def tensor_statistics(calls: list) -> tuple:
    """(keys, a tensor of rows): the statistics of the tensors among each forward call's ``(args, kwargs)``: sum,
    mean of squares, mean, max, min and norm (msprobe's config_check packs the last four); :func:`fingerprints_from`
    makes config.json's entries of them."""
    keys, stats = [], []
    for n, (args, kwargs) in enumerate(calls):
        items = [(str(i), a) for i, a in enumerate(args)] + [(str(k), v) for k, v in kwargs.items()]
        for key, value in items:
            if isinstance(value, torch.Tensor) and value.numel():
                x = value.detach().double()
                low, high = torch.aminmax(x)
                stats.append(torch.stack([x.sum(), (x * x).mean(), x.mean(), high, low]))  # norm: from the squares
                keys.append((n, key, list(value.shape), plain(value.dtype)))
    return keys, _rows(stats)


def fingerprints_from(keys: list, rows: list, calls: int) -> list:
    """Each of ``calls`` forward calls' ``{argument: {shape, dtype, statistics}}`` from :func:`tensor_statistics`."""
    found: list = [{} for _ in range(calls)]
    for (n, key, shape, dtype), row in zip(keys, rows):
        norm = math.sqrt(row[1] * math.prod(shape))
        found[n][key] = {"shape": shape, "dtype": dtype, **dict(zip(TENSOR_STATISTICS, row + [norm]))}
    return found


def environment() -> dict:
    """Python, the versions of the libraries the process has imported (None: not imported, so not in the numbers;
    a module's ``__version__``, the installed metadata only where it has none), the allow-listed variables set."""
    versions = {}
    for name in LIBRARIES:
        module = sys.modules.get(MODULES.get(name, name))
        version = getattr(module, "__version__", None) if module is not None else None
        if module is not None and not isinstance(version, str):
            try:  # parsing a package's metadata costs milliseconds: only for the few without __version__
                version = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                version = None
        versions[name] = version
    return {"python": platform.python_version(), "versions": versions,
            "variables": {k: os.environ[k] for k in VARIABLES if k in os.environ}}
