"""``ascend-tune compare-trace``: where the target loses time against the base, from two profiler traces.

kinds (THE table of step kinds and their rules), attribute (one trace's steps by module / op / kind), compare
(the rows, the gap and its noise), pair (picking the traces, the top contributor and its next action), table
(trace_compare.csv / .json and the text). Standard library only.
"""
