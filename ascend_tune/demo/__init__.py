"""``ascend-tune demo``: the instrumented demo pair (``pair``: a float32 reference and a bfloat16 target of one CNN
under TrainingMonitor) and its alignment page."""

from ..lazy import lazy_names

__getattr__, __dir__ = lazy_names(__name__, {name: "ascend_tune.demo.pair" for name in ("run_demo", "DemoResult")})
