"""Build metadata, as the real ``setup.py`` writes it: the package version and the git commit it was built from."""

__version__ = "2.13.0"
git_version = "0000000000000000000000000000000000000000"
