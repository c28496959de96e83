"""Build metadata, as the real ``setup.py`` writes it: the package version and the git commit it was built from.

The fake's version is the torch-npu release paired with the torch it sits on (``_fake_release``).
"""

from torch_npu._fake_release import RELEASE

__version__ = RELEASE
git_version = "0000000000000000000000000000000000000000"
