"""Fleet planner: the cheapest replica fleet meeting latency SLOs (see ``search.py``).

Library only: commands live in ``capsim/commands``; every simulation runs as a task on a
``capsim.sweep.executors`` executor.
"""
