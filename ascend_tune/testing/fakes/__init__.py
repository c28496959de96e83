"""Fake third-party packages for CPU-only tests; ``fakes_dir()`` is the folder to put on ``sys.path``.

The folder holds a faithful fake of ``torch_npu`` (real module paths and signatures, CPU maths). It changes nothing
in torch, so a test can import it and later drop every ``torch_npu*`` entry from ``sys.modules``. The legacy
``ptdbg_ascend`` fake lives apart, in ``legacy_dir()``, so a test that only wants an NPU does not also get ptdbg
(whose presence changes the precision backend ``auto`` picks).
"""

from __future__ import annotations

import os


def fakes_dir() -> str:
    """The folder that holds the fake packages; prepend it to ``sys.path`` to make ``import torch_npu`` find them."""
    return os.path.dirname(os.path.abspath(__file__))


def legacy_dir() -> str:
    """The folder that holds the fake ``ptdbg_ascend`` (legacy NPU images); prepend it to ``sys.path`` too."""
    return os.path.join(fakes_dir(), "legacy")
