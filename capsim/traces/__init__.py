"""Workloads: loaders for real trace formats, vLLM-style sampling, shipped compact defaults."""

from capsim.traces.table import RequestTable

__all__ = ["RequestTable"]
