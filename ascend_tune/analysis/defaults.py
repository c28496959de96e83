"""The verdicts' defaults, defined once: what the library functions, the CLI's flags, the report and the pytest
plugin all start from. No imports: the CLI reads these before it loads any analysis."""

LOSS_GAP = 0.05  # two loss curves are aligned below this mean relative per-step gap (the guide's 5% rule)
LOSS_NOISE_FLOOR = 0.01  # the least noise band of a loss gap (msprobe's guide: a mean relative error over 1%)
TRACE_THRESHOLD = 0.05  # compare-trace: slower by more than this share of the base step (and beyond noise) fails
TRACE_NOISE_FLOOR = 0.05  # compare-trace: the least share of the base step counted as noise
