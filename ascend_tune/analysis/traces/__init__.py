"""Profiler traces, one room for every reader of them: where they are (``find``), how a file parses (``files``), a
trace cut into steps (``model``, made by ``read``), the names a trace is read with and the step kinds
(``vocabulary``), the ``ascend-tune trace`` listing with torch_npu's timestamps repaired (``listing``), the slow rank
from every rank's trace (``ranks``) and compare-trace: one trace's steps by module / op / kind (``attribute``), two
traces' rows, gap and noise (``compare``), picking the traces and the next action (``pair``), the files and text
(``render``). Standard library only.
"""
