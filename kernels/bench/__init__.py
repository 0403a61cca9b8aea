"""Benchmark grid and runner for the GDN verify kernels (run on a GPU; nothing at import)."""
