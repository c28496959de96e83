"""Profiler traces: where they are (``find``), how a file reads (``load``), a trace cut into steps (``model``) and
the ``ascend-tune trace`` listing with torch_npu's timestamps repaired (``listing``). Standard library only.
"""
