"""scripts/kbench_ingest.py: a kernels call's files into the results folder (no build)."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("kbench_ingest", REPO / "scripts/kbench_ingest.py")
ingest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ingest)

GDN = ("kernel", "model_shape", "tree", "B", "p50_us", "check_ok", "contract_ok",
       "err_max_req_head")  # fmt: skip
STEP = ("op", "key", "m_tok", "n", "k", "p50_us")


def _csv(path: Path, cols, rows) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


def _call(tmp: Path, gdn_rows, num_rows=None, step_rows=()) -> tuple[Path, Path]:
    src, dst = tmp / "src", tmp / "dst"
    (src / "r7").mkdir(parents=True)
    dst.mkdir()
    (dst / "model_step_meta.json").write_text(json.dumps({"runs": [{"run": "run10"}]}))
    _csv(src / "r7/round7_gdn_cov.csv", GDN, gdn_rows)
    meta = {"num_rows": len(gdn_rows) if num_rows is None else num_rows, "checks_ok": True,
            "date_utc": "2026-12-02T03:15:00Z", "commit": "abc1234", "gpu": "NVIDIA H200"}  # fmt: skip
    (src / "r7/round7_meta.json").write_text(json.dumps(meta))
    if step_rows:
        _csv(src / "r7/round7_step_ops.csv", STEP, step_rows)
    (src / "nvsmi.txt").write_text("| NVIDIA H200 ... |\n")
    return src, dst


def _g(ok: str = "True", p50: str = "10.0") -> dict:
    return {"kernel": "replay", "model_shape": "m", "tree": "chain", "B": 1, "p50_us": p50,
            "check_ok": ok, "contract_ok": "True", "err_max_req_head": "1e-7"}  # fmt: skip


def test_a_cut_call_gets_its_checks_recomputed_and_the_step_run_recorded(tmp_path):
    step = [{"op": "moe_fp8", "key": "e256", "m_tok": 1, "n": 0, "k": 0, "p50_us": "5.0"}]
    src, dst = _call(tmp_path, [_g(), _g()], num_rows=1, step_rows=step)
    assert ingest.main(["--src", str(src), "--results", str(dst), "--no-build"]) == 0
    meta = json.loads((dst / "round7_meta.json").read_text())
    assert meta["num_rows"] == 2 and meta["checks_ok"] is True
    assert "recomputed" in meta["checks_recomputed_offline"]
    assert (dst / "round7_gdn_cov.csv").is_file() and (dst / "round7_nvsmi.txt").is_file()
    runs = json.loads((dst / "model_step_meta.json").read_text())["runs"]
    assert [r["run"] for r in runs] == ["run10", "run11"] and runs[-1]["op_rows"] == 1
    assert (dst / "model_step_run11_round7.csv").is_file()
    # same inputs, same files
    first = {p.name: p.read_bytes() for p in dst.iterdir()}
    ingest.main(["--src", str(src), "--results", str(dst), "--no-build"])
    assert {p.name: p.read_bytes() for p in dst.iterdir()} == first


def test_a_failed_float64_check_is_refused(tmp_path):
    src, dst = _call(tmp_path, [_g(), _g(ok="False")])
    with pytest.raises(SystemExit, match="checks_ok=False"):
        ingest.main(["--src", str(src), "--results", str(dst), "--no-build"])
    assert not (dst / "round7_gdn_cov.csv").exists()


def test_a_non_positive_step_timing_is_refused(tmp_path):
    step = [{"op": "gemm_fp8", "key": "x", "m_tok": 1, "n": 128, "k": 128, "p50_us": "0"}]
    src, dst = _call(tmp_path, [_g()], step_rows=step)
    with pytest.raises(SystemExit, match="p50_us='0'"):
        ingest.main(["--src", str(src), "--results", str(dst), "--no-build"])
    assert not (dst / "round7_gdn_cov.csv").exists()  # refused before anything is written


def test_a_round8_tarball_is_unpacked_and_ingested_under_its_round(tmp_path):
    """Round 8 returns r8.tar.gz (r8/round8_*, nvsmi.txt) next to round8_log.txt."""
    import tarfile

    pack, dst = tmp_path / "pack", tmp_path / "dst"
    (pack / "r8").mkdir(parents=True)
    dst.mkdir()
    _csv(pack / "r8/round8_gdn_cov.csv", GDN, [_g(), _g()])
    (pack / "r8/round8_meta.json").write_text(json.dumps({"num_rows": 2, "checks_ok": True}))
    (pack / "nvsmi.txt").write_text("| NVIDIA H200 ... |\n")
    src = tmp_path / "src"
    src.mkdir()
    with tarfile.open(src / "r8.tar.gz", "w:gz") as tf:
        tf.add(pack, arcname=".")
    (src / "round8_log.txt").write_text("round8 done\n")
    assert ingest.main(["--src", str(src), "--results", str(dst), "--no-build"]) == 0
    names = {p.name for p in dst.iterdir()}
    assert {"round8_gdn_cov.csv", "round8_meta.json", "round8_log.txt",
            "round8_nvsmi.txt"} <= names  # fmt: skip
    assert not any(n.startswith("round7") for n in names)
    with pytest.raises(SystemExit, match="no round7_meta.json"):
        ingest.main(["--src", str(src), "--results", str(dst), "--no-build",
                     "--prefix", "round7"])  # fmt: skip


@pytest.mark.parametrize(
    ("n", "not_prefixes"),
    [(10, ("round9", "round1_", "round0")), (11, ("round10", "round9", "round1_"))],
)
def test_a_two_digit_round_tarball_is_unpacked_and_ingested_under_its_round(
    tmp_path, n, not_prefixes
):
    """Rounds 10 and 11 return rN.tar.gz (rN/roundN_*, nvsmi.txt) next to roundN_log.txt; the
    two-digit round finds rN/ (not r0/ or r1/) and never another round's prefix."""
    import tarfile

    pack, dst = tmp_path / "pack", tmp_path / "dst"
    (pack / f"r{n}").mkdir(parents=True)
    dst.mkdir()
    _csv(pack / f"r{n}/round{n}_gdn_kc.csv", GDN, [_g(), _g()])
    (pack / f"r{n}/round{n}_meta.json").write_text(json.dumps({"num_rows": 2, "checks_ok": True}))
    (pack / "nvsmi.txt").write_text("| NVIDIA H200 ... |\n")
    src = tmp_path / "src"
    src.mkdir()
    with tarfile.open(src / f"r{n}.tar.gz", "w:gz") as tf:
        tf.add(pack, arcname=".")
    (src / f"round{n}_log.txt").write_text(f"round{n} done\n")
    assert ingest.main(["--src", str(src), "--results", str(dst), "--no-build"]) == 0
    names = {p.name for p in dst.iterdir()}
    assert {f"round{n}_gdn_kc.csv", f"round{n}_meta.json", f"round{n}_log.txt",
            f"round{n}_nvsmi.txt"} <= names  # fmt: skip
    assert not any(name.startswith(not_prefixes) for name in names)
    assert ingest.run_dir(src / "x", None) == (src / f"x/r{n}", f"round{n}")
    assert ingest.run_dir(src / "x", f"round{n}") == (src / f"x/r{n}", f"round{n}")


def _stream_src(tmp: Path, rows, copy_gbps=4250.0) -> tuple[Path, Path]:
    src, dst = tmp / "src", tmp / "dst"
    src.mkdir(parents=True)
    dst.mkdir()
    _csv(src / "round13_stream_ceiling.csv", ("variant", "p50_us", "check_ok"), rows)
    (src / "round13_stream_meta.json").write_text(json.dumps(
        {"copy_gbps": copy_gbps, "num_rows": len(rows), "num_timed": 1}))  # fmt: skip
    (src / "round13_stream_table.md").write_text("| t |\n")
    (src / "nvsmi.txt").write_text("| NVIDIA H200 |\n")
    return src, dst


def test_a_stream_ceiling_call_goes_to_its_round13_files_only(tmp_path):
    src, dst = _stream_src(tmp_path, [{"variant": "a", "p50_us": "1.0", "check_ok": "True"},
                                      {"variant": "b", "p50_us": "", "check_ok": ""}])  # fmt: skip
    assert ingest.main(["--src", str(src), "--results", str(dst)]) == 0
    assert sorted(p.name for p in dst.iterdir()) == [
        "round13_stream_ceiling.csv", "round13_stream_meta.json", "round13_stream_nvsmi.txt",
        "round13_stream_table.md"]
    bad, dst2 = _stream_src(tmp_path / "x", [{"variant": "a", "p50_us": "1.0",
                                               "check_ok": "False"}])  # fmt: skip
    with pytest.raises(SystemExit, match="failed their check"):
        ingest.main(["--src", str(bad), "--results", str(dst2)])


def test_a_ladder_call_goes_to_its_round14_files_only(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    rows = [{"variant": "v0", "p50_us": "1.0", "check_ok": "True"},
            {"variant": "v1", "p50_us": "", "check_ok": ""}]  # fmt: skip
    _csv(src / "round14_ladder.csv", ("variant", "p50_us", "check_ok"), rows)
    (src / "round14_ladder_meta.json").write_text(json.dumps({"copy_gbps": 4250.0}))
    (src / "round14_ladder_table.md").write_text("| t |\n")
    (src / "round14_ladder_log.txt").write_text("log\n")
    (src / "nvsmi.txt").write_text("| NVIDIA H200 |\n")
    assert ingest.main(["--src", str(src), "--results", str(dst)]) == 0
    assert sorted(p.name for p in dst.iterdir()) == [
        "round14_ladder.csv", "round14_ladder_log.txt", "round14_ladder_meta.json",
        "round14_ladder_nvsmi.txt", "round14_ladder_table.md"]
    rows[0]["check_ok"] = "False"
    _csv(src / "round14_ladder.csv", ("variant", "p50_us", "check_ok"), rows)
    with pytest.raises(SystemExit, match="failed their check"):
        ingest.main(["--src", str(src), "--results", str(tmp_path / "dst")])
