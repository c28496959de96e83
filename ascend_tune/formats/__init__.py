"""The contracts between the writers and the readers of ascend_tune's files.

Everything that names a file of a run folder, writes one so a reader never sees half of it, or formats / parses
a log line lives here, so the monitor that writes and the commands that read can never disagree. No torch import.
"""
