"""The trace advisor: findings from torch.profiler (CPU, GPU) and torch_npu traces, apart from how they are shown.

``analyse`` reads traces and returns the model (:class:`analyse.AdviceReport`); ``rules/`` holds what is looked for,
``steps`` the per-step time breakdown, ``msprof`` Ascend's own advisor; ``render`` turns a report into markdown or
``advice.html``. Whoever wants the page calls ``render.write_html`` after ``analyse.advise_traces``.
"""
