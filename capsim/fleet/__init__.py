"""N replicas behind a router, simulated jointly on one SimPy clock (see ``sim.py``)."""
