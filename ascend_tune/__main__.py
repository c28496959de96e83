"""``python -m ascend_tune``: the ``ascend-tune`` console script (``python -m ascend_tune run -- python train.py``)."""

import sys

from .cli import main

sys.exit(main())
