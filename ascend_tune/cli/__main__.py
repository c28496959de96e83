"""``python -m ascend_tune.cli``: the ``ascend-tune`` console script."""

import sys

from . import main

sys.exit(main())
