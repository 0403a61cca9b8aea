"""Workloads: loaders for real trace formats, vLLM-style sampling, shipped compact defaults.

Entry points: ``load_workload`` (named workloads from the shipped compact Parquet files),
``WORKLOADS`` (their names and descriptions), ``load_file`` (a user's own CSV/Parquet/JSONL).
Raw-format loaders: ``read_sharegpt``, ``read_spec_bench``, ``read_burstgpt``, ``read_azure``.
"""

from capsim.traces.arrivals import attach_arrivals, rescale_rate
from capsim.traces.azure import read_azure
from capsim.traces.burstgpt import (
    BurstgptStandin,
    burstgpt_standin,
    read_burstgpt,
    sample_burstgpt,
)
from capsim.traces.errors import RowIssue, TraceFormatError
from capsim.traces.sharegpt import read_sharegpt
from capsim.traces.spec_bench import read_spec_bench
from capsim.traces.stats import format_stats, workload_stats
from capsim.traces.synthetic import SYNTHETIC_PRESETS, SyntheticSpec, synthetic_table
from capsim.traces.table import RequestTable
from capsim.traces.userfile import load_file
from capsim.traces.workloads import (
    WORKLOAD_REGISTRY,
    WORKLOADS,
    Workload,
    load_workload,
    tokenizer_family,
)

__all__ = [
    "SYNTHETIC_PRESETS",
    "WORKLOADS",
    "WORKLOAD_REGISTRY",
    "BurstgptStandin",
    "RequestTable",
    "RowIssue",
    "SyntheticSpec",
    "TraceFormatError",
    "Workload",
    "attach_arrivals",
    "burstgpt_standin",
    "format_stats",
    "load_file",
    "load_workload",
    "read_azure",
    "read_burstgpt",
    "read_sharegpt",
    "read_spec_bench",
    "rescale_rate",
    "sample_burstgpt",
    "synthetic_table",
    "tokenizer_family",
    "workload_stats",
]
