"""Round 14 (issue 19): the verify / deferred ladder, one device call.

    python3 -m capsim_kernels.bench.gdn.ladder --out DIR [--budget-s 35] [--workers 14]
    TRITON_INTERPRET=1 python3 -m capsim_kernels.bench.gdn.ladder --out DIR --dry-run

Times the rungs of ladder_kernels.py (round 13's no-math stream, + the window's key /
query rows, + the packed K S^T / Q S^T products and the output stores, the real pipe_r
stream kernel alone, stage 1 alone, the whole verify launch; the deferred commit's
pattern, its real stream alone, its stage 1 alone, the whole deferred launch) at T = 4
(chain), fp32 state, with round 13's method (timing.time_graph_us: CUDA-graph replays, L2
flushed; the copy bandwidth of the same run) and its budget guard (stream_ceiling.Budget),
in priority order: every rung at 35B TP1 B = 256 (the target cell), then the candidate
restructurings there, then the rungs at 35B TP1 B = 64 and 397B TP8 B = 256.

Each cell's setup (the case, its float64 truth, one recorded call per policy) runs before
its first row and is guarded on its own (``setup_s`` in the metadata); every launch is
checked once before it is timed (a failed check is never timed). Writes
DIR/round14_ladder.csv, DIR/round14_ladder_meta.json, DIR/round14_ladder_table.md after
every row (atomically).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ...gdn_verify.policy import LaunchPolicy, PipeConfig
from . import bench_harness as bh
from .bench_harness import Budget

PREFIX = "round14_ladder"
NUM_NODES = 4
CELLS = (("qwen3.5-35b-a3b", 1, 256), ("qwen3.5-35b-a3b", 1, 64), ("qwen3.5-397b-a17b", 8, 256))
DRY_CELLS = (("tiny", 1, 3),)  # the interpreter: 3 requests of DRY_SHAPE
WARM_SHARE = 0.45
SETUP_ESTIMATE_S = 4.0  # a cell's setup before one has been measured


def _policies() -> dict[str, LaunchPolicy]:
    """The measured launches (variants.py) and the candidates; single_launch off, so small
    test cells take the pipelined path as the device cells (B * Hv >= 2048) do anyway."""
    from .variants import VARIANTS

    pol = {n: VARIANTS[n] for n in ("pipe_r", "pipe_re", "pipe_zw1p")}
    # candidates (NOTES.md section 21): the real stream kernel on round 13's lead tiling
    # (32-row tile, 8 warps, 1 stage, one program per tile); 64-key chunks (half the chunk
    # iterations, twice the chunk registers); 8 warps on pipe_r's 64-row tile
    pol["cand_w8s1"] = LaunchPolicy(pipe_verify=PipeConfig(1, 32, 8, 32, ctas_per_sm=4096,
                                                           pack_qk=True))  # fmt: skip
    pol["cand_kc64"] = LaunchPolicy(pipe_verify=PipeConfig(2, 64, 4, 64, pack_qk=True))
    pol["cand_w8"] = LaunchPolicy(pipe_verify=PipeConfig(2, 64, 8, 32, pack_qk=True))
    return {n: dataclasses.replace(p, single_launch=False) for n, p in pol.items()}


# (rung, policy, what): the order is the ladder's
VERIFY_RUNGS = (
    ("v0", None, "S_0 stream only (round 13 tile_read, pipe_r pattern, 5 / SM)"),
    ("v1", None, "v0 + the packed key / query rows per key chunk (summed), 5 / SM"),
    ("v2", None, "v1 + packed K S^T / Q S^T (bf16x3) accumulated, o / vt stored, 5 / SM"),
    ("v2b", "pipe_r", "v2 + v, ck, cq loaded: vt = v - ck K S^T, o = cq Q S^T, 5 / SM"),
    ("v3", "pipe_r", "the real pipe_r stream kernel alone (v2b + m1, pm and 2 [W, W] dots)"),
    ("prep", "pipe_r", "stage 1 (treewy_prep_kernel) alone"),
    ("v4", "pipe_r", "treewy_verify pipe_r (prep + stream): round 12's row"),
    ("v3", "pipe_re", "the real pipe_re stream kernel alone (early rows)"),
    ("v4", "pipe_re", "treewy_verify pipe_re (prep + stream): round 12's best"),
    ("v1a", None, "v1 at as many programs / SM as reside"),
    ("v2a", None, "v2 at as many programs / SM as reside"),
)
DEFERRED_RUNGS = (
    ("d0", None, "state read-write stream with pending rows (round 13 tile_rw, pipe_zw1p)"),
    ("d3", "pipe_zw1p", "the real pipe_zw1p deferred stream kernel alone"),
    ("dprep", "pipe_zw1p", "stage 1 with the pending coefficients alone"),
    ("d4", "pipe_zw1p", "treewy_deferred_verify pipe_zw1p (prep + stream): round 12's row"),
)
CANDIDATES = tuple((r, c, f"{c}: {what}") for c in ("cand_w8s1", "cand_kc64", "cand_w8")
                   for r, what in (("v3", "stream alone"), ("v4", "prep + stream")))  # fmt: skip

COLUMNS = ("group", "rung", "policy", "variant", "model_shape", "B", "T", "bv", "num_warps",
           "num_stages", "programs", "ctas_per_sm", "regs", "spills", "smem_bytes",
           "bytes_read", "bytes_written", "bytes", "p20_us", "p50_us", "p80_us", "gbps",
           "frac_copy", "x_v0", "us_over_v0", "ref", "us_over_ref", "check_ok", "check_err",
           "note")  # fmt: skip


@dataclass(frozen=True)
class Item:
    group: str
    cell: tuple[str, int, int]
    rung: str
    policy: str | None
    what: str

    def label(self) -> str:
        return f"{self.rung}{'@' + self.policy if self.policy else ''}: {self.what}"


def static_plan(cells=CELLS) -> list[Item]:
    """Every launch, in priority order: the target cell's verify and deferred rungs and the
    candidates, then the other cells' rungs."""
    items: list[Item] = []
    for n, cell in enumerate(cells):
        items += [Item("verify", cell, *r) for r in VERIFY_RUNGS]
        items += [Item("deferred", cell, *r) for r in DEFERRED_RUNGS]
        if n == 0:
            items += [Item("candidate", cell, *r) for r in CANDIDATES]
    return items


def _shape(cell):
    from .shapes import ModelShape, gdn_shape

    if cell[0] == "tiny":  # the dry run's and the tests' shape
        return ModelShape("tiny", num_v_heads=4, num_k_heads=2, dk=32, dv=32)
    return gdn_shape(cell[0], cell[1])


# the rung each row is compared with (``us_over_ref``): the rung below it on the ladder;
# pipe_re and the candidates against pipe_r's same rung; stage 1 alone against nothing
def reference_rung(item) -> str | None:
    if item.group == "candidate" or item.policy == "pipe_re":
        return f"{item.rung}@pipe_r"
    return {"v1": "v0@", "v2": "v1@", "v2b": "v2@", "v3": "v2b@pipe_r", "v4": "v3@pipe_r",
            "v1a": "v1@", "v2a": "v2@", "d3": "d0@",
            "d4": "d3@pipe_zw1p"}.get(item.rung)  # fmt: skip


def make_cell(cell, device: str, shape=None):
    from .ladder_kernels import LadderCell

    return LadderCell(shape or _shape(cell), cell[2], NUM_NODES, device)


def setup_cell(lc, items: list[Item], policies: dict) -> None:
    """The float64 truth and one recorded call per policy of the cell's items."""
    from .ladder_kernels import _pending_pair, _record

    lc.truth()
    _pending_pair(lc)
    for it in items:
        if it.policy is not None:
            _record(lc, policies[it.policy], it.group == "deferred")


def measure(item: Item, lc, policies: dict, timer, copy_gbps: float, prev: dict) -> dict:
    """One row; ``prev`` maps (cell, "rung@policy") to the p50s timed so far."""
    from .ladder_kernels import rung_launch

    row = dict.fromkeys(COLUMNS, "") | {
        "group": item.group, "rung": item.rung, "policy": item.policy or "",
        "variant": item.label(), "model_shape": lc.shape.name, "B": lc.batch, "T": lc.num_nodes,
    }  # fmt: skip
    try:
        rl = rung_launch(lc, item.rung, policies.get(item.policy))
        ok, err = rl.launch.check()
    except ValueError as exc:
        return row | {"note": f"skipped: {exc}"}
    except Exception as exc:  # a compile or launch failure: noted, the plan goes on
        return row | {"note": f"error: {type(exc).__name__}: {str(exc)[:200]}"}
    la = rl.launch
    row |= {"bv": rl.bv or "", "num_warps": rl.num_warps, "num_stages": rl.stages,
            "programs": la.programs, "ctas_per_sm": la.ctas_per_sm, "regs": la.regs,
            "spills": la.spills, "smem_bytes": la.smem_bytes, "bytes_read": la.bytes_read,
            "bytes_written": la.bytes_written, "bytes": la.bytes_read + la.bytes_written,
            "check_ok": ok, "check_err": f"{err:.3g}"}  # fmt: skip
    if not ok:
        return row | {"note": "check failed: not timed"}
    p20, p50, p80 = timer(la.fn)
    gbps = row["bytes"] / (p50 * 1e-6) / 1e9
    row |= {"p20_us": f"{p20:.2f}", "p50_us": f"{p50:.2f}", "p80_us": f"{p80:.2f}",
            "gbps": f"{gbps:.1f}", "frac_copy": f"{gbps / copy_gbps:.3f}"}  # fmt: skip
    base = prev.get((item.cell, "d0@" if item.group == "deferred" else "v0@"))
    if item.rung in ("v0", "d0"):
        base = p50
    if base:
        row |= {"x_v0": f"{p50 / base:.3f}", "us_over_v0": f"{p50 - base:.2f}"}
    ref = reference_rung(item)
    if ref is not None and (item.cell, ref) in prev:
        row |= {"ref": ref, "us_over_ref": f"{p50 - prev[(item.cell, ref)]:.2f}"}
    prev[(item.cell, f"{item.rung}@{item.policy or ''}")] = p50
    return row


class Runner:
    """The plan in order under the budget, one cell's setup before its first row."""

    def __init__(self, device: str, timer, copy_gbps: float, budget: Budget, save,
                 shapes: dict | None = None):  # fmt: skip
        self.device, self.timer, self.copy_gbps, self.budget = device, timer, copy_gbps, budget
        self.save, self.shapes = save, shapes or {}
        self.policies = _policies()
        self.cells: dict = {}
        self.rows: list[dict] = []
        self.not_reached: list[str] = []
        self.setup_s: dict[str, float] = {}
        self.prev: dict = {}

    def _enter(self, cell, items: list[Item]) -> bool:
        est = max(self.setup_s.values(), default=SETUP_ESTIMATE_S)
        if self.budget.elapsed() + est + self.budget.estimate() > self.budget.budget_s:
            return False
        t = self.budget.clock()
        lc = make_cell(cell, self.device, self.shapes.get(cell))
        setup_cell(lc, [it for it in items if it.cell == cell], self.policies)
        self.cells[cell] = lc
        self.setup_s[f"{cell[0]} tp{cell[1]} B={cell[2]}"] = round(self.budget.clock() - t, 2)
        return True

    def run(self, items: list[Item]) -> None:
        for n, item in enumerate(items):
            if not self.budget.allows() or (item.cell not in self.cells
                                            and not self._enter(item.cell, items)):
                self.not_reached += [f"{it.cell[0]} B={it.cell[2]} {it.label()}"
                                     for it in items[n:]]  # fmt: skip
                return
            t1 = self.budget.clock()
            row = measure(item, self.cells[item.cell], self.policies, self.timer,
                          self.copy_gbps, self.prev)  # fmt: skip
            self.rows.append(row)
            self.budget.record(self.budget.clock() - t1)
            self.save(self.rows)
            print(f"{self.budget.elapsed():6.1f}s {row['model_shape']} B={row['B']} "
                  f"{row['variant']}: {row['p50_us'] or row['note']} us, x v0 {row['x_v0']}, "
                  f"{row['us_over_ref']} us over {row['ref']}", flush=True)  # fmt: skip


# ------------------------------------------------------------------------------ outputs
TABLE_HEAD = ("| group | rung | shape | B | p50 us | x v0 | us over v0 | us over ref | GB/s "
              "| x copy | programs / SM | regs (spills) | smem KB | check |\n" + "|---" * 14 + "|")


def _line(r: dict) -> str:
    smem = f"{int(r['smem_bytes']) / 1024:.1f}" if r["smem_bytes"] not in ("", 0) else ""
    regs = f"{r['regs']}" + (f" ({r['spills']})" if r["spills"] not in ("", 0, "0") else "")
    us = r["p50_us"] or r["note"][:60]
    ref = f"{r['us_over_ref']} ({r['ref'].rstrip('@')})" if r["ref"] else ""
    return (f"| {r['group']} | {r['variant']} | {r['model_shape']} | {r['B']} | {us} "
            f"| {r['x_v0']} | {r['us_over_v0']} | {ref} | {r['gbps']} "
            f"| {r['frac_copy']} | {r['ctas_per_sm']} | {regs} | {smem} | {r['check_err']} |")


def render_table(rows: list[dict], copy_gbps: float) -> str:
    return "\n".join([
        f"# Round 14: TreeWY verify / deferred ladder (copy bandwidth {copy_gbps:.1f} GB/s)", "",
        "T = 4 chain, fp32 state. x v0 = p50 / the cell's v0 (verify) or d0 (deferred) p50; "
        "us over ref = p50 - the p50 of the rung named in brackets (the rung below it; pipe_re and "
        "the candidates: pipe_r's same rung).", "",
        TABLE_HEAD, *map(_line, rows), "",
    ])  # fmt: skip


def save_outputs(out: Path, rows: list[dict], meta: dict) -> None:
    """CSV, markdown table and metadata, each written atomically."""
    bh.write_outputs(out, PREFIX, f"{PREFIX}.csv", rows, COLUMNS,
                  render_table(rows, meta["copy_gbps"]), meta)  # fmt: skip


# ------------------------------------------------------------------------------ warm-up
def warm_worker(spec: str, dry: bool) -> int:
    """Worker ``i/n``: compile (and run once) its share of the plan's launches; cells are
    built per launch, no truth, no checks."""
    from .ladder_kernels import rung_launch

    plan = static_plan(DRY_CELLS if dry else CELLS)
    seen, todo = set(), []
    for it in plan:  # one launch per compile group: a policy's prep + stream, or a rung
        key = (it.cell, it.policy, it.group == "deferred") if it.policy else (it.cell, it.rung[:2])
        if key not in seen:
            seen.add(key)
            todo.append(it)
    policies = _policies()
    cells: dict = {}

    def launch(it: Item) -> None:
        if it.cell not in cells:
            cells[it.cell] = make_cell(it.cell, "cpu" if dry else "cuda")
        rung_launch(cells[it.cell], it.rung, policies.get(it.policy)).launch.fn()

    return bh.run_warm_share(spec, todo, launch)


# ------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    flags = bh.base_parser(__doc__, 35.0, 14, "verify,deferred,candidate",
                           "the CPU interpreter, a tiny cell")  # fmt: skip
    begun = bh.begin(argv, flags, warm_worker, Runner, save_outputs, module=__spec__.name,
                     name="capsim_kernels.bench.gdn.ladder", warm_share=WARM_SHARE,
                     bytes_note="unique bytes read + written per launch (v3 / d3: the family's "
                     "bytes less the gates and betas, plus stage 1's scratch); x copy = GB/s / "
                     "copy_gbps (timing.measure_copy_gbps, 2 GiB, read + write)",
                     num_nodes=NUM_NODES)  # fmt: skip
    if isinstance(begun, int):
        return begun
    args, meta, runner = begun
    groups = args.groups.split(",")
    runner.run([it for it in static_plan(DRY_CELLS if args.dry_run else CELLS)
                if it.group in groups])  # fmt: skip
    meta |= bh.end_fields(runner.budget, runner.not_reached, 60) | {"setup_s": runner.setup_s}
    save_outputs(args.out, runner.rows, meta)
    bh.print_summary(PREFIX, meta, runner.not_reached)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
