"""The run report: the model gathered from a run folder (build), its markdown / HTML (render), its plots (plots).

Modules are imported by path (``ascend_tune.analysis.report.build``, ...). No torch import; matplotlib only inside
the plotting functions.
"""
