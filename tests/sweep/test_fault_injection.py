"""Fault injection on a sweep's results directory (issue 20): kill -9 mid-write, byte
corruption, truncated and edited files, foreign steps files, implausible rows, a full or
read-only disk. Small grids with the fake point function: seconds in all.

Every damaged file must be detected (named in a warning) and recomputed, or refused with
one line naming the file; never reused; nothing finished before a failure is lost.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from sweep_fakes import WORKLOADS, fake_simulate, small_spec

from capsim.sweep.executors import SerialExecutor
from capsim.sweep.runner import run_sweep


def _run(spec, out, warn=None):  # type: ignore[no-untyped-def]
    return run_sweep(
        spec,
        out,
        executor=SerialExecutor(),
        point_fn=fake_simulate,
        progress=False,
        workloads=WORKLOADS,
        warn=warn,
    )


@pytest.fixture
def spec():  # type: ignore[no-untyped-def]
    return small_spec()


@pytest.fixture(scope="module")
def _clean(tmp_path_factory):  # type: ignore[no-untyped-def]
    """One finished sweep, computed once for the module."""
    out = tmp_path_factory.mktemp("clean") / "res"
    rep = _run(small_spec(), out)
    assert rep.ok and rep.num_computed == 20
    return out


@pytest.fixture
def done(_clean, tmp_path):  # type: ignore[no-untyped-def]
    """A private copy of the finished sweep directory and its points table."""
    out = tmp_path / "res"
    shutil.copytree(_clean, out)
    (out / ".lock").unlink(missing_ok=True)
    return out, pd.read_parquet(out / "points.parquet")


def _first(out: Path, sub: str) -> Path:
    return sorted((out / sub).iterdir())[0]


def _rehash(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    """Edit a point record and give it a matching content hash (a consistent forgery:
    only the plausibility rules or the steps checks can catch it)."""
    import capsim.sweep.store as store

    rec = json.loads(path.read_text())
    edit(rec)
    if hasattr(store, "record_hash"):  # (absent before issue 20: nothing to forge)
        rec["sha256"] = store.record_hash(rec)
    path.write_text(json.dumps(rec))


def _resume(spec, out, before):  # type: ignore[no-untyped-def]
    warnings: list[str] = []
    rep = _run(spec, out, warn=warnings.append)
    assert rep.ok
    pd.testing.assert_frame_equal(pd.read_parquet(out / "points.parquet"), before)
    return rep, warnings


# -- byte corruption, truncation, foreign files ------------------------------------------
def test_steps_file_with_damaged_data_pages_is_recomputed(spec, done) -> None:  # type: ignore[no-untyped-def]
    out, before = done
    steps = _first(out, "steps")
    data = bytearray(steps.read_bytes())
    data[len(data) // 3] ^= 0xFF  # a data page, the footer stays intact
    steps.write_bytes(bytes(data))
    rep, warnings = _resume(spec, out, before)
    assert rep.num_computed == 1
    assert any(str(steps) in w and "sha256" in w for w in warnings), warnings


def test_steps_file_of_another_point_is_recomputed(spec, done) -> None:  # type: ignore[no-untyped-def]
    out, before = done
    a, b = sorted((out / "steps").iterdir())[:2]
    shutil.copyfile(b, a)
    rep, warnings = _resume(spec, out, before)
    assert rep.num_computed == 1 and any(str(a) in w for w in warnings), warnings


def test_foreign_steps_file_with_a_forged_hash_is_caught_by_its_point_id(spec, done) -> None:  # type: ignore[no-untyped-def]
    out, before = done
    a, b = sorted((out / "steps").iterdir())[:2]
    shutil.copyfile(b, a)
    sha = hashlib.sha256(a.read_bytes()).hexdigest()
    _rehash(out / "points" / f"{a.stem}.json", lambda r: r.update(steps_sha256=sha))
    rep, warnings = _resume(spec, out, before)
    assert rep.num_computed == 1
    assert any(f"belongs to point {b.stem!r}" in w for w in warnings), warnings


def test_steps_file_from_another_sweep_is_caught_by_its_fingerprint(spec, done, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out, before = done
    other = tmp_path / "other"
    _run(small_spec(num_requests=41), other)
    # same point id is impossible across specs (the id hashes the config): forge one
    pid = _first(out, "steps").stem
    import pyarrow.parquet as pq

    table = pq.read_table(_first(other, "steps"))
    meta = dict(table.schema.metadata)
    meta[b"capsim.point_id"] = pid.encode()
    pq.write_table(table.replace_schema_metadata(meta), out / "steps" / f"{pid}.parquet")
    sha = hashlib.sha256((out / "steps" / f"{pid}.parquet").read_bytes()).hexdigest()
    _rehash(out / "points" / f"{pid}.json", lambda r: r.update(steps_sha256=sha))
    rep, warnings = _resume(spec, out, before)
    assert rep.num_computed == 1 and any("another sweep" in w for w in warnings), warnings


@pytest.mark.parametrize("cut", [0, 7, -20])
def test_truncated_point_and_steps_files_are_recomputed(spec, done, cut) -> None:  # type: ignore[no-untyped-def]
    out, before = done
    for sub in ("points", "steps"):
        f = _first(out, sub)
        f.write_bytes(f.read_bytes()[:cut])
    rep, warnings = _resume(spec, out, before)
    assert rep.num_computed >= 1 and warnings


def test_flipped_digit_in_a_point_record_is_caught_by_its_hash(spec, done) -> None:  # type: ignore[no-untyped-def]
    out, before = done
    f = _first(out, "points")
    rec = json.loads(f.read_text())
    rec["row"]["output_throughput_tok_per_s"] *= 1.5  # still a plausible number
    f.write_text(json.dumps(rec))
    rep, warnings = _resume(spec, out, before)
    assert rep.num_computed == 1 and any("sha256" in w for w in warnings), warnings


# -- implausible rows (consistent forgeries: the hash matches) ----------------------------
@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda r: r["row"].update(peak_kv_usage=5.0), "peak_kv_usage=5.0 is above 1"),
        (lambda r: r["row"].update(num_requests=10**9), "exceeds the 40 offered"),
        (lambda r: r["row"].update(peak_running=10**6), "peak_running=1000000 exceeds"),
        (lambda r: r["row"].update(ttft_mean_s=None), "ttft_mean_s=None is null"),
        (lambda r: r["row"].update(extra_col=1.0), "extra ['extra_col']"),
        (lambda r: r.update(wall_s=-3.0), "wall_s=-3.0 is negative"),
        (lambda r: r["row"].update(mean_kv_usage=0.9, peak_kv_usage=0.5), "exceeds peak_kv"),
    ],
)
def test_implausible_reused_row_is_recomputed(spec, done, edit, needle) -> None:  # type: ignore[no-untyped-def]
    out, before = done
    f = _first(out, "points")
    _rehash(f, edit)
    rep, warnings = _resume(spec, out, before)
    assert rep.num_computed == 1 and any(needle in w for w in warnings), warnings


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"ttft_median_s": 9.0, "ttft_p99_s": 1.0}, "ttft_median_s=9.0 exceeds ttft_p99_s=1.0"),
        ({"mean_acceptance_len_tok": 4.5}, "mean_acceptance_len_tok=4.5 is outside [1, 4]"),
        ({"prefix_cache_queries_tok": 10, "prefix_cache_hits_tok": 11}, "hits_tok=11 exceeds"),
        ({"peak_running": 30, "max_num_seqs": 16}, "peak_running=30 exceeds max_num_seqs=16"),
        ({"steady_num_requests": 41}, "steady_num_requests=41 exceeds num_requests=40"),
        ({"duration_s": float("inf")}, "duration_s=inf is not a finite number"),
        ({"ttft_p99_s": None}, "ttft_p99_s=None is not a finite number"),
    ],
)
def test_row_rules(change, needle) -> None:  # type: ignore[no-untyped-def]
    from capsim.sweep.plausible import row_problem

    row = {
        "num_requests": 40,
        "duration_s": 10.0,
        "output_throughput_tok_per_s": 100.0,
        "ttft_median_s": 0.1,
        "ttft_p99_s": 0.5,
        "peak_kv_usage": 0.5,
        "mean_acceptance_len_tok": 3.2,
    }
    assert row_problem(row, offered_requests=40, num_draft_tok=3) is None
    why = row_problem({**row, **change}, offered_requests=40, num_draft_tok=3)
    assert why is not None and needle in why, why


def test_implausible_result_is_never_written(spec, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from capsim.sim_result import SimResult

    def bad(cfg):  # type: ignore[no-untyped-def]
        r = fake_simulate(cfg)
        return SimResult(
            config=r.config,
            summary={**r.summary, "peak_kv_usage": 2.0},
            requests=r.requests,
            steps=r.steps,
            step_time_model=r.step_time_model,
        )

    rep = run_sweep(
        spec,
        tmp_path / "o",
        executor=SerialExecutor(),
        point_fn=bad,
        progress=False,
        workloads=WORKLOADS,
    )
    assert not rep.ok and len(rep.failures) == 20
    assert "peak_kv_usage=2.0 is above 1" in next(iter(rep.failures.values()))
    assert not list((tmp_path / "o" / "points").glob("*.json"))


def test_consolidated_tables_have_their_hash_in_the_manifest(done) -> None:  # type: ignore[no-untyped-def]
    out, _ = done
    files = json.loads((out / "manifest.json").read_text())["files"]
    for name in ("points.parquet", "matched.parquet"):
        assert files[name] == hashlib.sha256((out / name).read_bytes()).hexdigest()


# -- manifests and directories -------------------------------------------------------------
@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda m: m.update(runs={"a": 1}), "manifest runs=dict, expected a list"),
        (lambda m: m.update(runs=None), "manifest runs=NoneType, expected a list"),
        (lambda m: m["spec"].update(num_requests=41), "does not match its fingerprint"),
    ],
)
def test_edited_manifest_is_refused(spec, done, edit, needle) -> None:  # type: ignore[no-untyped-def]
    from capsim.sweep.store import SweepMismatchError

    out, _ = done
    m = json.loads((out / "manifest.json").read_text())
    edit(m)
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(SweepMismatchError, match=needle):
        _run(spec, out)


def test_points_being_a_file_is_refused(spec, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "o"
    out.mkdir()
    (out / "points").write_text("not a directory")
    with pytest.raises(ValueError, match=r"points: exists and is not a directory"):
        _run(spec, out)


def test_stale_tmp_files_are_removed_on_resume(spec, done) -> None:  # type: ignore[no-untyped-def]
    out, before = done
    stale = [out / "points" / ".x.json.abc.tmp", out / "steps" / ".y.parquet.def.tmp"]
    for s in stale:
        s.write_bytes(b"half")
    _resume(spec, out, before)
    assert not any(s.exists() for s in stale)


# -- kill -9 mid-write ---------------------------------------------------------------------
def test_kill_9_mid_write_resumes_to_identical_results(spec, done, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, clean = done
    out = tmp_path / "killed"
    script = tmp_path / "writer.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys, time
        sys.path[:0] = {[str(Path(__file__).parent), *sys.path]!r}
        import capsim.io.atomic as atomic
        from sweep_fakes import WORKLOADS, fake_simulate, small_spec
        from capsim.sweep.executors import SerialExecutor
        from capsim.sweep.runner import run_sweep

        real, calls = atomic._commit, [0]
        def slow_commit(tmp, path):
            calls[0] += 1
            if calls[0] == 9:  # a few points in: the temporary file is written, not renamed
                print("MID-WRITE", tmp, flush=True)
                time.sleep(60)
            real(tmp, path)
        atomic._commit = slow_commit
        run_sweep(small_spec(), {str(out)!r}, executor=SerialExecutor(),
                  point_fn=fake_simulate, progress=False, workloads=WORKLOADS)
    """)
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("MID-WRITE"), line
        tmp = Path(line.split()[1])
        assert tmp.exists()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    rep = _run(spec, out)
    assert rep.ok and 0 < rep.num_reused < 20 and not tmp.exists()
    assert not list(out.rglob(".*.tmp"))
    pd.testing.assert_frame_equal(pd.read_parquet(out / "points.parquet"), clean)
    runs = json.loads((out / "manifest.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["killed", "finished"]


# -- full and read-only disks --------------------------------------------------------------
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
def test_failed_write_names_the_path_marks_the_run_and_keeps_finished_points(
    spec, tmp_path, monkeypatch, code
) -> None:  # type: ignore[no-untyped-def]
    """Injected at the OS boundary (as root, a read-only directory is still writable, so
    EACCES cannot be produced with chmod here)."""
    import capsim.io.atomic as atomic

    out = tmp_path / "o"
    real, calls = atomic._commit, [0]

    def failing_commit(tmp, path):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] == 11:
            raise OSError(code, os.strerror(code), str(tmp))
        real(tmp, path)

    monkeypatch.setattr(atomic, "_commit", failing_commit)
    with pytest.raises(ValueError, match=rf"{errno.errorcode[code]}.*rerun the same command"):
        _run(spec, out)
    monkeypatch.setattr(atomic, "_commit", real)
    m = json.loads((out / "manifest.json").read_text())
    assert m["runs"][-1]["status"] == "failed: SweepWriteError"
    assert str(out) in m["runs"][-1]["error"]
    kept = len(list((out / "points").glob("*.json")))
    assert kept >= 3
    rep = _run(spec, out)
    assert rep.ok and rep.num_reused == kept


def _small_tmpfs(where: Path) -> str | None:
    """Mount a 1 MiB tmpfs at ``where``; the reason it cannot, else None."""
    where.mkdir()
    if shutil.which("mount") is None:
        return "no mount command"
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        return f"cannot mount a tmpfs here ({res.stderr.strip() or res.returncode})"
    return None


def test_real_enospc_on_a_small_tmpfs(spec, tmp_path) -> None:  # type: ignore[no-untyped-def]
    mnt = tmp_path / "tiny"
    why = _small_tmpfs(mnt)
    if why:
        pytest.skip(why)
    try:
        filler = mnt / "filler"
        with filler.open("wb") as f:  # leave ~60 KB: a few points fit, then the disk is full
            f.write(b"\0" * (1024 * 1024 - 60 * 1024))
        with pytest.raises(ValueError, match="ENOSPC"):
            _run(spec, mnt / "o")
        kept = len(list((mnt / "o" / "points").glob("*.json")))
        filler.unlink()
        rep = _run(spec, mnt / "o")
        assert rep.ok and rep.num_reused == kept
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
