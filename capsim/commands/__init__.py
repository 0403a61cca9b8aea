"""Every click module of ``capsim``: parse, configure, call, write.

Nothing in the library imports this package (``tests/test_layers.py`` checks it).
"""
