"""capsim crosscheck on a synthetic live dir (no server): plumbing, ordering, schema."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from click.testing import CliRunner

from capsim.commands.live import crosscheck_cmd
from capsim.live.crosscheck import engine_order

DATA = Path(__file__).parent / "data"


def _live_dir(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text((DATA / "qwen3next_config.json").read_text())
    live = tmp_path / "live"
    live.mkdir()
    n = 12
    rng = np.random.default_rng(0)
    req = pd.DataFrame(
        {
            "req_id": [f"r{i}" for i in range(n)],
            "source_id": [f"t:{i}" for i in range(n)],
            "prompt_tok": rng.integers(20, 300, n),
            "output_tok": rng.integers(20, 120, n),
            "send_s": np.linspace(0, 0.01, n),
        }
    )
    req.to_parquet(live / "requests.parquet")
    observed = {"output_throughput_tok_per_s": 100.0, "ttft_p99_s": 1.0, "peak_running": 3}
    (live / "summary.json").write_text(
        json.dumps({"summary": observed, "config": {"live": {"concurrency": 6}}})
    )
    server = {"model_dir": str(model), "block_size": 32, "num_gpu_blocks": 14, "max_num_seqs": 8,
              "max_num_batched_tokens": 512, "max_model_len": 2048}  # fmt: skip
    (live / "server.json").write_text(json.dumps(server))
    rows = []
    t = 1000.0
    for k in range(200):
        dec = 1 + k % 3
        step = 0.004 + 0.001 * dec
        rows.append({"t_unix_s": t, "step_s": step, "num_tok": dec + 64 * (k % 5 == 0),
                     "num_req": dec + (k % 5 == 0), "num_decode_req": dec,
                     "decode_ctx_tok": 100 * dec, "new_req_ids": []})  # fmt: skip
        t += step + 0.0005
    rows[0]["new_req_ids"] = ["cmpl-r2-0-aa", "cmpl-r0-0-bb"]
    with (live / "step_log.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return live


def test_engine_order_follows_first_admissions() -> None:
    req = pd.DataFrame({"req_id": ["r0", "r1", "r2", "r3"], "send_s": [0.0, 0.1, 0.2, 0.3]})
    log = pd.DataFrame({"new_req_ids": [["cmpl-r2-0-x"], [], ["cmpl-r0-0-y", "cmpl-r2-0-x"]]})
    assert engine_order(req, log) == [2, 0, 1, 3]
    assert engine_order(req, pd.DataFrame({"step_s": [0.1]})) == [0, 1, 2, 3]


def test_crosscheck_simulates_the_live_requests(tmp_path: Path) -> None:
    live = _live_dir(tmp_path)
    out = CliRunner().invoke(crosscheck_cmd, [str(live)])
    assert out.exit_code == 0, out.output
    report = json.loads((live / "crosscheck.json").read_text())
    sim = report["simulated_summary"]
    # 13 usable blocks of 544 tokens, 4 per request (3 GDN groups + 1 attention): 3 fit
    assert sim["block_size_tok"] == 544 and sim["peak_running"] == 3
    assert sim["num_requests"] == 12
    want = int(pd.read_parquet(live / "requests.parquet")["output_tok"].sum())
    assert sim["total_output_tok"] == want
    rows = {r["metric"]: r for r in report["rows"]}
    assert rows["peak_running"]["rel_err"] == 0.0
    assert report["step_time_model"]["kind"] == "live-fitted"
