"""What one simulated point returns.

``summary`` holds scalar metrics (vLLM / ``vllm bench serve`` definitions):
  num_requests, duration_s, output_throughput_tok_per_s, total_token_throughput_tok_per_s,
  ttft_mean_s, ttft_median_s, ttft_p99_s, tpot_mean_s, tpot_median_s, tpot_p99_s,
  itl_mean_s, itl_median_s, itl_p99_s, e2el_mean_s, e2el_median_s, e2el_p99_s,
  peak_kv_usage, mean_kv_usage, peak_running, peak_waiting, num_preemptions,
  mean_acceptance_len_tok (tokens emitted per verify step, bonus included),
  num_blocks, usable_blocks, block_size_tok, gdn_blocks_per_request, analytical_capacity_req
``requests``: one row per request (req_id, source_id, prompt_tok, output_tok, send_s,
  first_scheduled_s, first_token_s, finish_s, ttft_s, tpot_s, e2el_s, num_preemptions).
``steps``: one row per engine step (t_start_s, step_s, num_running, num_waiting,
  num_scheduled_tok, num_prefill_tok, num_decode_req, num_free_blocks, kv_usage,
  num_preempted, num_admitted, num_emitted_tok).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd


@dataclass(frozen=True, slots=True, kw_only=True)
class SimResult:
    config: dict[str, Any] = field(metadata={"help": "SimConfig.to_dict() of the point"})
    summary: dict[str, float | int | str] = field(metadata={"help": "scalar metrics"})
    requests: pd.DataFrame = field(metadata={"help": "one row per request"})
    steps: pd.DataFrame = field(metadata={"help": "one row per engine step"})
    step_time_model: dict[str, Any] = field(metadata={"help": "StepTimeModel.describe()"})
