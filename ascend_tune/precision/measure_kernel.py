"""A replay's measure of a large tensor in two passes of C: what :func:`.golden.measure`'s torch passes compute.

torch has no kernel that reads two tensors once for their difference's extremes and both sums of squares, so
:func:`.golden.measure` makes ~9 passes over float64 buffers. This module's C function reads the device's values
(float32 or float64, contiguous, on the CPU) and the golden ones (float64) twice: the extremes of ``device -
golden`` and the sums of squares of that difference and of the golden values, then, with ``rms`` of the golden
values known, the largest ``|diff| / max(|golden|, rms)`` and how many exceed ``rtol``, in vectors of the CPU's
width (GCC / Clang vector extensions), two vectors at a time. A replayed step of the small GPT of
benchmarks/replay_overhead.py measures 9.4 million elements here: ~9 ms in C (~0.7 ns an element, AMD EPYC, AVX2),
~32 ms in torch's passes.

The package ships no compiled code: the C source below is compiled once per machine by the system's C compiler
(``$CC``, else ``cc`` / ``gcc``; ``-O3 -march=native`` where /proc/cpuinfo names the CPU, else ``-O3``) into
``$ASCEND_TUNE_CACHE`` (default ``$XDG_CACHE_HOME/ascend_tune`` or ``~/.cache/ascend_tune``), under a name keyed by
the source, the flags and the CPU (its model and feature flags: a cache shared by hosts of several kinds keeps one
library for each, and none is loaded where its instructions may be missing), written beside and renamed into place
(ranks compiling at once each write their own). Without a compiler, with an unwritable cache, a library that does
not load, or with ``ASCEND_TUNE_NO_COMPILE=1``, :func:`measure` returns None and the torch passes measure: the same
figures (sums in another order: the last bits of a sum of squares may differ).
"""

from __future__ import annotations

import ctypes
import logging
import platform
import sys
import threading
from typing import Any, Optional

import torch

from ..config import env_switch
from ..contract import native
from ..errors import ConfigError

logger = logging.getLogger("ascend_tune")

SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Vectors of 4 doubles where the build targets AVX (one ymm register), else of 2 (SSE2, NEON): wider than the
   target's registers they would be spilled, slower than plain loops. */
#if defined(__AVX__)
#define LANES 4
#else
#define LANES 2
#endif
typedef double vd __attribute__((vector_size(8 * LANES)));
typedef float vf __attribute__((vector_size(4 * LANES)));
typedef int64_t vl __attribute__((vector_size(8 * LANES)));

static inline vd pick(vl mask, vd a, vd b) { return (vd)(((vl)a & mask) | ((vl)b & ~mask)); }
static inline vd magnitude(vd a) { return (vd)((vl)a & (INT64_MAX + (vl){})); }
static inline vd load_float(const float *p) { vf v; memcpy(&v, p, sizeof v); return __builtin_convertvector(v, vd); }
static inline vd load_double(const double *p) { vd v; memcpy(&v, p, sizeof v); return v; }

/* out: min and max of d - g, sum of (d - g)^2, sum of g^2, the largest |d - g| / max(|g|, rms) and how many exceed
   rtol (0 when that largest does not). Returns 0, or 1 when a value is not finite (or a sum overflows) or the
   golden values are all zero: the caller's torch passes take those. Two vectors an iteration, each with sums and
   extremes of its own: one chain of additions waits on itself (~1.0 ns an element here, ~0.7 in two chains). */
#define MEASURE(NAME, T, LOAD)                                                                                  \
int NAME(const T *restrict d, const double *restrict g, int64_t n, double rtol, double *out) {                  \
    vd lo = INFINITY + (vd){}, hi = -INFINITY + (vd){}, s = {0}, q = {0}, s2 = {0}, q2 = {0};                   \
    int64_t i = 0, end = n - n % (2 * LANES);                                                                   \
    for (; i < end; i += 2 * LANES) {                                                                           \
        vd gi = load_double(g + i), a = LOAD(d + i) - gi;                                                       \
        vd gj = load_double(g + i + LANES), b = LOAD(d + i + LANES) - gj;                                       \
        vd l2 = pick(b < a, b, a), h2 = pick(b > a, b, a);                                                      \
        lo = pick(l2 < lo, l2, lo);                                                                             \
        hi = pick(h2 > hi, h2, hi);                                                                             \
        s += a * a; s2 += b * b;                                                                                \
        q += gi * gi; q2 += gj * gj;                                                                            \
    }                                                                                                           \
    s += s2; q += q2;                                                                                           \
    double low = lo[0], high = hi[0], diff_sq = 0, gold_sq = 0;                                                 \
    for (int k = 0; k < LANES; k++) {                                                                           \
        low = lo[k] < low ? lo[k] : low;                                                                        \
        high = hi[k] > high ? hi[k] : high;                                                                     \
        diff_sq += s[k];                                                                                        \
        gold_sq += q[k];                                                                                        \
    }                                                                                                           \
    for (; i < n; i++) {                                                                                        \
        double a = (double)d[i] - g[i];                                                                         \
        low = a < low ? a : low;                                                                                \
        high = a > high ? a : high;                                                                             \
        diff_sq += a * a;                                                                                       \
        gold_sq += g[i] * g[i];                                                                                 \
    }                                                                                                           \
    out[0] = low; out[1] = high; out[2] = diff_sq; out[3] = gold_sq; out[4] = 0; out[5] = 0;                    \
    if (!(isfinite(low) && isfinite(high) && isfinite(diff_sq) && isfinite(gold_sq)) || gold_sq == 0)           \
        return 1;                                                                                               \
    if (low == 0 && high == 0)                                                                                  \
        return 0;                                                                                               \
    double rms = sqrt(gold_sq) / sqrt((double)n), top = 0;                                                      \
    vd rms_v = rms + (vd){}, limit = rtol + (vd){}, best = {0}, best2 = {0};                                    \
    vl over = {0}, over2 = {0};                                                                                 \
    for (i = 0; i < end; i += 2 * LANES) {                                                                      \
        vd gi = load_double(g + i), a = magnitude(LOAD(d + i) - gi), m = magnitude(gi);                         \
        vd gj = load_double(g + i + LANES), b = magnitude(LOAD(d + i + LANES) - gj), m2 = magnitude(gj);        \
        vd r = a / pick(m > rms_v, m, rms_v), r2 = b / pick(m2 > rms_v, m2, rms_v);                             \
        best = pick(r > best, r, best); best2 = pick(r2 > best2, r2, best2);                                    \
        over -= r > limit; over2 -= r2 > limit;                                                                 \
    }                                                                                                           \
    best = pick(best2 > best, best2, best); over += over2;                                                      \
    int64_t count = 0;                                                                                          \
    for (int k = 0; k < LANES; k++) {                                                                           \
        top = best[k] > top ? best[k] : top;                                                                    \
        count += over[k];                                                                                       \
    }                                                                                                           \
    for (; i < n; i++) {                                                                                        \
        double a = fabs((double)d[i] - g[i]), m = fabs(g[i]);                                                   \
        double r = a / (m > rms ? m : rms);                                                                     \
        top = r > top ? r : top;                                                                                \
        count += r > rtol;                                                                                      \
    }                                                                                                           \
    out[4] = top;                                                                                               \
    out[5] = top > rtol ? (double)count : 0;                                                                    \
    return 0;                                                                                                   \
}
MEASURE(measure_f32, float, load_float)
MEASURE(measure_f64, double, load_double)
"""

FLAGS = ("-O3", "-std=c99", "-shared", "-fPIC")
NATIVE = ("-march=native",)  # this CPU's vector units (AVX2 doubles the speed); the cache's name is keyed by the CPU
_lock = threading.Lock()
_tried = False
_functions: dict = {}  # torch dtype of the device's values -> the C function


def measure(device: torch.Tensor, golden: torch.Tensor, rtol: float) -> Optional[tuple]:
    """``(low, high, diff_sq, gold_sq, max_rel, over)`` of ``device`` (any device; float32 or float64, float16 and
    bfloat16 read as float32, exactly) against ``golden`` (CPU float64, the same shape); None for other dtypes, when
    the compiled function is not there, or when the values need the torch passes (inf or nan, golden values all
    zero)."""
    functions = _functions if _tried else _load()
    if not functions or golden.dtype is not torch.float64 or golden.device.type != "cpu":
        return None
    if golden.shape != device.shape:  # the C reads as many values from each
        return None
    if device.dtype in (torch.float16, torch.bfloat16):
        device = device.to(torch.float32)  # exact
    function = functions.get(device.dtype)
    if function is None:
        return None
    if device.device.type != "cpu":
        device = device.to("cpu")
    device, golden = device.contiguous(), golden.contiguous()
    out = (ctypes.c_double * 6)()
    if function(device.data_ptr(), golden.data_ptr(), device.numel(), rtol, out):
        return None
    return out[0], out[1], out[2], out[3], out[4], int(out[5])


def available() -> bool:
    """Whether the compiled function is loaded (compiling it on the first call)."""
    return bool(_functions if _tried else _load())


def _load() -> dict:
    global _tried
    with _lock:
        if not _tried:
            try:
                library = None if env_switch("ASCEND_TUNE_NO_COMPILE") else _library()
            except ConfigError as exc:  # a word the switch does not know: not compiled, and said so
                logger.warning("ascend_tune: %s; a replay measures in torch passes", exc)
                library = None
            except Exception as exc:  # no compiler, a cache that cannot be written, a library that does not load
                logger.debug("replay measures in torch passes: %s", exc)
                library = None
            if library is not None:
                for dtype, name in ((torch.float32, "measure_f32"), (torch.float64, "measure_f64")):
                    function = getattr(library, name)
                    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_double,
                                         ctypes.c_void_p]
                    function.restype = ctypes.c_int
                    _functions[dtype] = function
            _tried = True
    return _functions


def _library() -> Any:
    cpu = native.cpu()
    tries = ((*FLAGS, *NATIVE), FLAGS) if cpu else (FLAGS,)  # this CPU's instructions only where its name says which
    return native.load_built("measure", ".so", "measure.c", SOURCE, tries,
                             (*tries[0], sys.platform, platform.machine(), cpu), ctypes.CDLL, ("-lm",))
