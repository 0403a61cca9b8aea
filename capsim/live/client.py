"""Drive an OpenAI-compatible vLLM server like ``vllm bench serve`` and record the run.

Closed loop: ``concurrency`` workers each send the next request as soon as their previous
one finished. Open loop (``request_rate_per_s``): request i is released at capsim's
``loadgen.release_times_s`` for that rate and seed (gamma gaps, Poisson at burstiness 1,
like ``vllm bench serve --request-rate``) and sent then, with ``concurrency`` as the cap
on requests in flight (``--max-concurrency``). Every request is a streaming
``/v1/completions`` call with token-id prompts, ``ignore_eos`` and ``max_tokens`` = the
workload's output length, so the server produces exactly the workload's tokens. Times
are client-side, as in ``vllm bench serve`` (``benchmarks/serve.py``): TTFT = send ->
first streamed chunk, ITL = gaps between chunks, E2EL = send -> last chunk,
TPOT = (E2EL - TTFT) / (output - 1).

The result has the schema of ``capsim simulate`` (``capsim.sim_result.SimResult``); the
``steps`` table comes from the engine's own per-step log when the server was started with
one (``capsim.live.server``), else from ``/metrics`` samples.
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from capsim.config import LoadConfig
from capsim.live.prom import MetricsSampler, fetch_metrics
from capsim.loadgen import release_times_s
from capsim.metrics import STEP_COLUMNS, summarize
from capsim.sim_result import SimResult
from capsim.traces.table import RequestTable

_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
# ids 0..2 are bos/eos/pad in the tiny tokenizer (experiments/live/build_tiny_models.py)
FIRST_PLAIN_TOKEN_ID = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveRun:
    url: str
    concurrency: int
    num_requests: int
    served_name: str = "tiny"
    vocab_size: int = 512
    seed: int = 0
    timeout_s: float = 600.0
    metrics_period_s: float = 0.1
    request_rate_per_s: float | None = None
    burstiness: float = 1.0

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlparse(self.url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"live.url={self.url!r} must be http://HOST:PORT")
        if self.concurrency < 1:
            raise ValueError(f"live.concurrency={self.concurrency} must be >= 1")
        if self.num_requests < 1:
            raise ValueError(f"live.num_requests={self.num_requests} must be >= 1")
        if self.vocab_size <= FIRST_PLAIN_TOKEN_ID:
            raise ValueError(f"live.vocab_size={self.vocab_size} is too small")
        if self.request_rate_per_s is not None:
            self.load()  # LoadConfig checks rate and burstiness, naming the field

    def load(self) -> LoadConfig:
        """The capsim load this run applies (closed loop, or open loop at the rate)."""
        if self.request_rate_per_s is None:
            return LoadConfig(mode="concurrency", concurrency=self.concurrency,
                              num_requests=self.num_requests)  # fmt: skip
        return LoadConfig(mode="rate", rate_req_per_s=self.request_rate_per_s,
                          burstiness=self.burstiness, concurrency=self.concurrency,
                          num_requests=self.num_requests)  # fmt: skip

    def release_s(self, n: int) -> np.ndarray:
        """When each of ``n`` requests may be sent, seconds after the run starts."""
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 1]))
        return release_times_s(self.load(), n, rng, None)


def _prompt_ids(rng: np.random.Generator, n: int, vocab: int) -> list[int]:
    return rng.integers(FIRST_PLAIN_TOKEN_ID, vocab, size=n).tolist()


def _stream_one(
    conn_args: tuple[str, int],
    body: dict[str, Any],
    t0: float,
    timeout_s: float,
    req_id: str,
    release_s: float = 0.0,
) -> dict[str, Any]:
    wait_s = t0 + release_s - time.perf_counter()
    if wait_s > 0:
        time.sleep(wait_s)
    conn = http.client.HTTPConnection(*conn_args, timeout=timeout_s)
    send = time.perf_counter() - t0
    chunks: list[float] = []
    usage_tok = None
    try:
        conn.request(
            "POST", "/v1/completions", body=json.dumps(body),
            # vLLM names the request after X-Request-Id (serving.py:_base_request_id), so
            # the engine's step log can say in which order requests really arrived
            headers={"Content-Type": "application/json", "X-Request-Id": req_id},
        )  # fmt: skip
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"server answered {resp.status}: {resp.read()[:300]!r}")
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            now = time.perf_counter() - t0
            msg = json.loads(data)
            if msg.get("usage"):
                usage_tok = int(msg["usage"].get("completion_tokens", 0))
            if msg.get("choices"):
                chunks.append(now)
    finally:
        conn.close()
    if not chunks:
        raise RuntimeError("stream ended without a token chunk")
    return {"release_s": release_s, "send_s": send, "chunks": chunks, "completion_tok": usage_tok}


def run_live(run: LiveRun, table: RequestTable, step_log: Path | None = None) -> SimResult:
    """Send ``run.num_requests`` requests of ``table`` with ``run.concurrency`` in flight."""
    n = min(run.num_requests, table.num_requests)
    rng = np.random.default_rng(np.random.SeedSequence(run.seed))
    prompts = [_prompt_ids(rng, int(table.prompt_tok[i]), run.vocab_size) for i in range(n)]
    release = run.release_s(n)
    parsed = urllib.parse.urlparse(run.url)
    conn_args = (parsed.hostname or "127.0.0.1", parsed.port or 80)
    results: list[dict[str, Any] | None] = [None] * n
    errors: list[str] = []
    lock = threading.Lock()
    next_i = [0]
    m_before = fetch_metrics(run.url)
    t0 = time.perf_counter()
    t0_unix = time.time()
    sampler = MetricsSampler(url=run.url, period_s=run.metrics_period_s)
    sampler.start(t0)

    def worker() -> None:
        while True:
            with lock:
                i = next_i[0]
                if i >= n or errors:
                    return
                next_i[0] += 1
            body = {
                "model": run.served_name,
                "prompt": prompts[i],
                "max_tokens": int(table.output_tok[i]),
                "min_tokens": int(table.output_tok[i]),
                "ignore_eos": True,
                "temperature": 0.0,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            try:
                results[i] = _stream_one(conn_args, body, t0, run.timeout_s, f"r{i}",
                                         float(release[i]))  # fmt: skip
            except Exception as exc:  # recorded and re-raised after the workers stop
                with lock:
                    errors.append(f"request {i}: {type(exc).__name__}: {exc}")
                return

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(run.concurrency, n))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=run.timeout_s)
    sampler.stop()
    if errors:
        raise RuntimeError("live run failed: " + "; ".join(errors[:3]))
    m_after = fetch_metrics(run.url)
    return _to_result(run, table, n, results, sampler.samples, m_before, m_after, step_log,
                      t0_unix)  # fmt: skip


def _to_result(
    run: LiveRun,
    table: RequestTable,
    n: int,
    results: list[dict[str, Any] | None],
    samples: list[dict[str, float]],
    m_before: dict[str, float],
    m_after: dict[str, float],
    step_log: Path | None,
    t0_unix: float,
) -> SimResult:
    rows, itl = [], []
    for i, r in enumerate(results):
        if r is None:
            raise RuntimeError(f"request {i} did not complete")
        chunks = r["chunks"]
        out_tok = r["completion_tok"] if r["completion_tok"] else len(chunks)
        ttft = chunks[0] - r["send_s"]
        e2el = chunks[-1] - r["send_s"]
        itl.extend(np.diff(chunks).tolist())
        rows.append(
            {
                "req_id": f"r{i}",
                "source_id": table.source_id[i] if table.source_id else f"{table.name}:{i}",
                "prompt_tok": int(table.prompt_tok[i]),
                "output_tok": int(out_tok),
                "release_s": r["release_s"],
                "send_s": r["send_s"],
                "first_scheduled_s": math.nan,
                "first_token_s": chunks[0],
                "finish_s": chunks[-1],
                "ttft_s": ttft,
                "tpot_s": (e2el - ttft) / (out_tok - 1) if out_tok > 1 else math.nan,
                "e2el_s": e2el,
                "num_preemptions": 0,
            }
        )
    req_df = pd.DataFrame(rows)
    steps_df = _steps_frame(step_log, t0_unix) if step_log else pd.DataFrame()
    source = "engine_step_log"
    if steps_df.empty:
        steps_df = _steps_from_samples(samples)
        source = "metrics_samples"
    summary: dict[str, Any] = summarize(req_df, steps_df, np.asarray(itl))
    preempt_metrics = m_after.get("vllm:num_preemptions_total", 0.0) - m_before.get(
        "vllm:num_preemptions_total", 0.0
    )
    summary["num_preemptions"] = (
        int(steps_df["num_preempted"].sum())
        if source == "engine_step_log"
        else int(preempt_metrics)
    )
    summary["num_preemptions_metrics"] = int(preempt_metrics)
    if samples:
        s = pd.DataFrame(samples)
        summary["metrics_peak_running"] = float(s["running"].max())
        summary["metrics_peak_waiting"] = float(s["waiting"].max())
        summary["metrics_peak_kv_usage"] = float(s["kv_usage"].max())
    summary["steps_source"] = source
    summary |= _spec_counts(m_before, m_after)
    summary["live"] = 1
    config = {
        "live": {"url": run.url, "concurrency": run.concurrency, "num_requests": n,
                 "served_name": run.served_name, "seed": run.seed},
        "workload": table.name,
        "load": {"mode": run.load().mode, "concurrency": run.concurrency, "num_requests": n,
                 "rate_req_per_s": run.request_rate_per_s, "burstiness": run.burstiness},
        "cache_config_info": _cache_info(run.url),
    }  # fmt: skip
    return SimResult(
        config=config,
        summary=summary,
        requests=req_df,
        steps=steps_df,
        step_time_model={"kind": "live", "url": run.url},
    )


def _spec_counts(m_before: dict[str, float], m_after: dict[str, float]) -> dict[str, Any]:
    """vLLM's speculative-decoding counters over the run (absent without speculation):
    drafts, draft tokens, accepted tokens, and accepted tokens per draft position."""
    out: dict[str, Any] = {}
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        key = f"vllm:spec_decode_{name}_total"
        if key in m_after:
            out[f"spec_{name}"] = int(m_after[key] - m_before.get(key, 0.0))
    pos = sorted((int(k.rsplit("=", 1)[1]), k) for k in m_after if k.startswith(_PER_POS + "="))
    if pos:
        out["spec_accepted_per_pos"] = [int(m_after[k] - m_before.get(k, 0.0)) for _, k in pos]
    return out


def _cache_info(url: str) -> dict[str, str]:
    """Labels of ``vllm:cache_config_info`` (block_size, num_gpu_blocks, ...)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = line.split("{", 1)[1].rsplit("}", 1)[0]
            out = {}
            for part in labels.split('",'):
                k, _, v = part.partition("=")
                out[k.strip()] = v.strip().strip('"')
            return out
    return {}


def read_step_log(path: Path) -> pd.DataFrame:
    rows = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    return pd.DataFrame(rows)


def _steps_frame(step_log: Path, t0_unix: float) -> pd.DataFrame:
    if not Path(step_log).exists():
        return pd.DataFrame()
    raw = read_step_log(step_log)
    if raw.empty:
        return raw
    raw = raw[raw["t_unix_s"] >= t0_unix - 1.0].reset_index(drop=True)
    df = pd.DataFrame(
        {
            "t_start_s": raw["t_unix_s"] - t0_unix,
            "step_s": raw["step_s"],
            "num_running": raw["running"],
            "num_waiting": raw["waiting"],
            "num_scheduled_tok": raw["num_tok"],
            "num_prefill_tok": raw["num_prefill_tok"],
            "num_decode_req": raw["num_decode_req"],
            "num_free_blocks": raw["free_blocks"],
            "kv_usage": raw["usage"],
            "num_preempted": raw["num_preempted"],
            "num_admitted": 0,
            "num_emitted_tok": 0,  # not logged by the step hook
        }
    )
    # prefix-cache columns: the live runs serve with --no-enable-prefix-caching
    return df.reindex(columns=list(STEP_COLUMNS), fill_value=0)


def _steps_from_samples(samples: list[dict[str, float]]) -> pd.DataFrame:
    s = pd.DataFrame(samples)
    if s.empty:
        return pd.DataFrame(columns=list(STEP_COLUMNS))
    df = pd.DataFrame(dict.fromkeys(STEP_COLUMNS, 0), index=s.index)
    df["t_start_s"] = s["t_s"]
    df["step_s"] = s["t_s"].diff().fillna(0.0)
    df["num_running"] = s["running"].astype(int)
    df["num_waiting"] = s["waiting"].astype(int)
    df["kv_usage"] = s["kv_usage"]
    return df[list(STEP_COLUMNS)]
