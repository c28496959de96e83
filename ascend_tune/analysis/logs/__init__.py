"""Training logs: reading ascend_tune's and the frameworks' logs (read, detect, hf, lightning, tensorboard, scan)
into one model (model.LossLog), loss-curve compare, rate statistics, throughput.

Modules are imported by path (``ascend_tune.analysis.logs.read``, ...); this package holds no names of its own, so
importing one of them costs nothing else. No torch import.
"""
