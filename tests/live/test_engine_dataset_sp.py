"""Shared-prefix datasets for the real engine: prompts built from shared segments (equal
segment ids give equal token ids), the CSV's segments column, and capsim's out-of-sample
table attaching those segments to a recorded run's requests (and hitting its prefix cache)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from capsim.live.engine_dataset import (
    format_segments,
    parse_segments,
    workload_rows,
    write_custom_dataset,
)
from capsim.live.engine_jobs import parse_jobs
from capsim.live.engine_oos import RealRun, load_run, request_table, sim_config
from capsim.simulate import simulate
from capsim.traces.table import RequestTable

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "experiments" / "engine" / "data"
QWEN3 = REPO.parent / "shared" / "traces" / "tokenizers" / "qwen3" / "tokenizer.json"
SP_PATH = "/tmp/capsim_engine/model/datasets/sharedprefix512.jsonl"
# 300 distinct lowercase 4-letter words
WORDS = ["".join(chr(97 + (i // 26**k) % 26) for k in range(3)) + "x" for i in range(300)]


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A word-level tokenizer with the byte-level pre-tokenizer: ' word' is one token."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{"\u0120" + w: i + 1 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


SYS_A, SYS_B = 1 << 48, (1 << 48) + 1
TABLE = RequestTable(
    name="t",
    prompt_tok=np.array([30, 25, 12, 40, 9]),
    output_tok=np.array([5, 3, 10, 2, 6]),
    segments=(
        ((SYS_A, 20), (-1, 15)),
        ((SYS_A, 20), (-2, 8)),
        ((SYS_B, 20), (-3, 2)),  # prompt 12 < the system prompt
        ((SYS_B, 20), (-4, 22)),
        ((-5, 15),),
    ),
)


def _encode(tokenizer: Path, text: str) -> list[int]:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer)).encode(text, add_special_tokens=False).ids


def test_segmented_prompts_share_leading_ids_and_counts_are_exact(
    tiny_tokenizer: Path, tmp_path: Path
) -> None:
    jsonl, csv = tmp_path / "d.jsonl", tmp_path / "d.csv"
    write_custom_dataset(TABLE, tiny_tokenizer, jsonl, csv, seed=7)
    rows = [json.loads(x) for x in jsonl.read_text().splitlines()]
    ids = [_encode(tiny_tokenizer, r["prompt"]) for r in rows]
    assert [len(x) for x in ids] == TABLE.prompt_tok.tolist()
    assert [r["output_tokens"] for r in rows] == TABLE.output_tok.tolist()
    assert ids[0][:20] == ids[1][:20] and ids[0][20] != ids[1][20]
    assert ids[2] == ids[3][:12]  # a prompt shorter than its system prompt: a prefix of it
    assert ids[3][:20] != ids[0][:20]
    data = pd.read_csv(csv, dtype={"segments": str})
    assert list(data.columns) == ["prompt_tok", "output_tok", "source_id", "segments"]
    got = tuple(parse_segments(s, "x") for s in data["segments"])
    assert got == TABLE.segments
    # deterministic bytes for one seed; another seed gives other text, same lengths
    write_custom_dataset(TABLE, tiny_tokenizer, tmp_path / "e.jsonl", tmp_path / "e.csv", seed=7)
    assert (tmp_path / "e.jsonl").read_bytes() == jsonl.read_bytes()
    assert (tmp_path / "e.csv").read_bytes() == csv.read_bytes()
    write_custom_dataset(TABLE, tiny_tokenizer, tmp_path / "f.jsonl", tmp_path / "f.csv", seed=8)
    assert (tmp_path / "f.jsonl").read_bytes() != jsonl.read_bytes()
    assert (tmp_path / "f.csv").read_bytes() == csv.read_bytes()


def test_table_without_segments_keeps_the_old_csv(tiny_tokenizer: Path, tmp_path: Path) -> None:
    plain = RequestTable(name="p", prompt_tok=np.array([3, 4]), output_tok=np.array([1, 2]))
    write_custom_dataset(plain, tiny_tokenizer, tmp_path / "p.jsonl", tmp_path / "p.csv")
    assert (tmp_path / "p.csv").read_text() == "prompt_tok,output_tok,source_id\n3,1,p:0\n4,2,p:1\n"


def test_segments_text_round_trips_and_errors_name_the_row() -> None:
    segs = ((SYS_A, 2048), (-17, 300))
    assert format_segments(segs) == f"{SYS_A}:2048;-17:300"
    assert parse_segments(format_segments(segs), "r") == segs
    with pytest.raises(ValueError, match=r"^data.csv row 3: segments='1:2;x' must be 'id:n;id:n'$"):
        parse_segments("1:2;x", "data.csv row 3")


def test_committed_sharedprefix_csv_is_capsims_workload() -> None:
    rows = workload_rows("shared-prefix", 512, 0, 6144, 1024)
    data = pd.read_csv(DATA / "sharedprefix512.csv", dtype={"segments": str, "source_id": str})
    assert data["prompt_tok"].tolist() == rows.prompt_tok.tolist()
    assert data["output_tok"].tolist() == rows.output_tok.tolist()
    assert tuple(data["source_id"]) == rows.source_id
    assert rows.segments is not None
    assert tuple(data["segments"]) == tuple(format_segments(s) for s in rows.segments)
    assert len({s[0][0] for s in rows.segments}) == 16


@pytest.mark.skipif(not QWEN3.exists(), reason="needs shared/traces/tokenizers/qwen3")
def test_qwen3_rows_sharing_a_system_prompt_share_its_2048_token_ids(tmp_path: Path) -> None:
    rows = workload_rows("shared-prefix", 24, 0, 6144, 1024)
    write_custom_dataset(rows, QWEN3, tmp_path / "s.jsonl", tmp_path / "s.csv")
    prompts = [json.loads(x)["prompt"] for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert rows.segments is not None
    lead = [s[0][0] for s in rows.segments]
    i = next(i for i in range(1, 24) if lead[i] in lead[:i])
    j = lead.index(lead[i])
    a, b = _encode(QWEN3, prompts[j]), _encode(QWEN3, prompts[i])
    assert a[:2048] == b[:2048] and a[2048:2060] != b[2048:2060]
    k = next(k for k in range(24) if lead[k] != lead[i])
    assert _encode(QWEN3, prompts[k])[:2048] != a[:2048]


# -- the out-of-sample table: a recorded run's requests + the dataset's segments --------------


def _server(enable_prefix_caching: bool = True) -> dict[str, object]:
    """server.json of a k=0 gmu 0.9 run with vLLM 0.26's batch defaults."""
    return {
        "gpu_memory_utilization": 0.9,
        "num_speculative_tokens": 0,
        "max_num_seqs": None,
        "max_num_batched_tokens": None,
        "enable_prefix_caching": enable_prefix_caching,
    }


def _sp_run(pc: bool = True) -> RealRun:
    """The shared-prefix dataset's first 192 rows at 64 clients, as a recorded run would be."""
    data = pd.read_csv(DATA / "sharedprefix512.csv").iloc[:192]
    reqs = pd.DataFrame({"input_len": data["prompt_tok"], "output_len": data["output_tok"]})
    bench = {"dataset_path": SP_PATH, "max_concurrency": 64}
    return RealRun("g090_k0_pc_sp_c64", _server(pc), bench, reqs, {})


def _run_dir(root: Path, name: str, prompt: list[int], output: list[int], path: str) -> Path:
    d = root / "runs" / name
    d.mkdir(parents=True)
    bench = {"num_prompts": len(prompt), "max_concurrency": 4, "dataset_path": path}
    (d / "job.json").write_text(json.dumps({"name": name, "bench": bench}))
    (d / "server.json").write_text(json.dumps(_server()))
    summ = dict.fromkeys(
        ("output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms"), 1.0
    )
    (d / "bench_summary.json").write_text(json.dumps(summ))
    pd.DataFrame({"input_len": prompt, "output_len": output, "ttft_s": 0.1, "e2el_s": 1.0}).to_csv(
        d / "requests.csv", index=False
    )
    (d / "metrics.csv").write_text("t_s,running\n0,1\n")
    return d


def _data_csv(root: Path, stem: str, table: RequestTable) -> None:
    assert table.segments is not None
    (root / "data").mkdir(exist_ok=True)
    lines = ["prompt_tok,output_tok,source_id,segments"] + [
        f"{p},{o},{sid},{format_segments(s)}"
        for p, o, sid, s in zip(
            table.prompt_tok, table.output_tok, table.source_id, table.segments, strict=True
        )
    ]
    (root / "data" / f"{stem}.csv").write_text("\n".join(lines) + "\n")


def test_request_table_attaches_matching_segments(tmp_path: Path) -> None:
    _data_csv(tmp_path, "tiny", TABLE)
    p, o = TABLE.prompt_tok.tolist(), TABLE.output_tok.tolist()
    run = load_run(_run_dir(tmp_path, "ok", p[:4], o[:4], "/m/datasets/tiny.jsonl"))
    t = request_table(run)  # default: the data folder next to the runs root
    assert t.segments == TABLE.segments[:4] and t.prompt_tok.tolist() == p[:4]
    assert request_table(run, tmp_path / "elsewhere").segments is None
    other = load_run(_run_dir(tmp_path, "other", p, o, "/m/datasets/sharegpt512.jsonl"))
    assert request_table(other).segments is None  # no CSV for that stem: as before


def test_request_table_refuses_a_mismatch_naming_run_and_row(tmp_path: Path) -> None:
    _data_csv(tmp_path, "tiny", TABLE)
    p, o = TABLE.prompt_tok.tolist(), TABLE.output_tok.tolist()
    run = load_run(_run_dir(tmp_path, "bad", [*p[:2], 13, *p[3:]], o, "/m/tiny.jsonl"))
    with pytest.raises(ValueError, match=r"^run bad: requests.csv row 2 has input_len=13, "):
        request_table(run)
    long = load_run(_run_dir(tmp_path, "long", [*p, 5], [*o, 1], "/m/tiny.jsonl"))
    with pytest.raises(ValueError, match=r"^run long: requests.csv has 6 rows, .* only 5$"):
        request_table(long)


def test_shared_prefix_run_with_prefix_caching_computes_fewer_prefill_tokens() -> None:
    computed, hits, served = {}, {}, {}
    for pc in (True, False):
        run = _sp_run(pc)
        t = request_table(run, DATA)
        assert t.segments is not None
        res = simulate(sim_config(run), workload=t)
        computed[pc] = int(res.steps["num_prefill_tok"].sum())
        hits[pc] = int(res.summary["prefix_cache_hits_tok"])
        served[pc] = int(res.requests["cached_tok"].sum())
    assert hits[False] == 0 and served[False] == 0 and served[True] > 0
    # the prefill saved is what the cache served each request once ...
    assert computed[True] + served[True] == computed[False]
    # ... while vLLM 0.26's counter adds every lookup of a request left waiting (vllm_rules
    # "prefix_stats_at_admission": since 0.27 the two are equal)
    assert hits[True] >= served[True]
    # at least one attention block of the 2048-token system prompt per repeat user
    assert served[True] > 0.3 * int(run.requests["input_len"].sum())


def test_call32_job_list_parses() -> None:
    raw = json.loads((REPO / "experiments" / "engine" / "jobs" / "call32.json").read_text())
    jobs, settings = parse_jobs(raw)
    assert [j.name for j in jobs] == [
        "s_g090_k0_pc_sp",
        "g090_k0_pc_sp_c64",
        "s_g090_k1_pc_sp",
        "g090_k1_pc_sp_c64",
    ]
    for j, k in ((jobs[0], 0), (jobs[2], 1)):
        assert j.server is not None and j.server.num_speculative_tokens == k
        assert j.server.enable_prefix_caching and j.server.step_log and j.est_s == 300
        # a cold k=0 prefix-caching start-up took 346 s (call 9): the runner allows 1.5 x est_s
    for j in (jobs[1], jobs[3]):
        assert j.bench is not None and j.bench.dataset_path == SP_PATH and j.est_s == 90
        assert j.bench.reset_prefix_cache  # the measured run starts cold, as capsim's
        assert (j.bench.num_prompts, j.bench.warmup_prompts, j.bench.max_concurrency) == (
            512,
            64,
            64,
        )
    assert "warm-up" in settings["note"].lower()


def test_prefix_stats_count_every_lookup_in_0_26_and_once_since_0_27() -> None:
    """vLLM 0.26.0 records PrefixCacheStats in get_computed_blocks, on every lookup of a
    waiting request; 0.27.0 records once, at admission (read in both wheels). On the
    shared-prefix rows at 64 clients some requests are looked up, left waiting and looked up
    again: the 0.26 counter exceeds what was served, the 0.27 one equals it."""
    run = _sp_run()
    reqs = run.requests
    t = request_table(run, DATA)
    base = sim_config(run)
    out = {}
    for v in ("0.26", "0.27"):
        cfg = dataclasses.replace(base, engine=dataclasses.replace(base.engine, vllm_version=v))
        res = simulate(cfg, workload=t)
        out[v] = (
            int(res.summary["prefix_cache_hits_tok"]),
            int(res.summary["prefix_cache_queries_tok"]),
            int(res.requests["cached_tok"].sum()),
        )
    hits, queries, served = out["0.27"]
    assert hits == served and queries == int(reqs["input_len"].sum())
    hits, queries, served = out["0.26"]
    assert hits > served and queries > int(reqs["input_len"].sum())


def test_align_cut_of_0_26_admits_a_prompt_shorter_than_a_block_on_a_partial_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM 0.26.0's `_mamba_block_aligned_split` floors a chunk to a block only when it ends
    before the last whole block; 0.27 floors every chunk that ends before the prompt does. The
    recorded g090pc_k0_rand_c128 run (1024-token prompts, 1056-token blocks, 8192 batched
    tokens), with 0.26's per-lookup counters: on 0.26's cut no request is held back, so the
    tokens looked up are the prompts' (real vLLM 0.26 counted 393,216, exactly that); with
    0.27's cut the eighth prompt of a step gets an empty chunk, waits and is looked up again."""
    import capsim.simulate as sim_mod
    from capsim.vllm_rules import rules_for

    run = load_run(REPO / "experiments" / "engine" / "runs" / "g090pc_k0_rand_c128")
    cfg, t = sim_config(run), request_table(run)
    prompts = int(run.requests["input_len"].sum())
    assert int(simulate(cfg, workload=t).summary["prefix_cache_queries_tok"]) == prompts == 393216
    later_cut = dataclasses.replace(rules_for("0.26"), align_split_to_prefill_end=True)
    monkeypatch.setattr(sim_mod, "rules_for", lambda v: later_cut)
    assert int(simulate(cfg, workload=t).summary["prefix_cache_queries_tok"]) > prompts


@pytest.mark.parametrize("name", ["call40.json", "call41.json", "call42.json"])
def test_the_staged_job_lists_ran_as_staged(name: str) -> None:
    """PLAN.md 2026-12-04 02:11 staged them, 03:27 ran them unchanged (session 13): each fits the
    600 s call limit, and every job it names is recorded (serving runs in runs/, start-ups in
    startups/)."""
    raw = json.loads((REPO / "experiments" / "engine" / "jobs" / name).read_text())
    jobs, _ = parse_jobs(raw)
    assert jobs[0].kind == "startup" and jobs[0].server is not None and jobs[0].server.step_log
    assert all(j.kind == "bench" for j in jobs[1:])
    assert sum(j.est_s for j in jobs) <= 560, name
    engine = REPO / "experiments" / "engine"
    runs = {p.name for p in (engine / "runs").iterdir()}
    startups = {p.stem for p in (engine / "startups").glob("*.log")}
    assert {j.name for j in jobs[1:]} <= runs and jobs[0].name in startups
