"""Precision dumps: one model and reader for the builtin, msprobe and ptdbg layouts, the overflow rule, the compare."""
