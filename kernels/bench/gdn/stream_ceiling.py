"""Round 13 (issue 19): the state stream's own bandwidth ceiling in Triton, one device call.

    python3 -m capsim_kernels.bench.gdn.stream_ceiling --out DIR [--budget-s 100] [--workers 12]
    TRITON_INTERPRET=1 python3 -m capsim_kernels.bench.gdn.stream_ceiling --out DIR --dry-run

Times the no-math streaming kernels of stream_kernels.py next to torch's device-to-device
copy of the same bytes (and torch's sum / in-place add of them) in the same run, with the
project's method (timing.time_graph_us: CUDA-graph replays, L2 flushed), at B = 256, 64, 1
of the 35B TP1 and 397B TP8 per-GPU shapes (from capsim's presets), in priority order:

1. ``matched``, every cell: the torch references, the verify stream's tiling (pipe_r: 64-row
   dv tile halved at small B, 32-key chunks, 4 warps, 2 stages, 5 programs / SM; pipe_re:
   4 / SM; and as many as reside), the deferred commit's (pipe_zw1p: 16-row tile, 1 warp,
   3 stages, TMA load + store, 12 / SM, pending rows read once; and as many as reside), the
   flat read and read-write;
2. ``sweep_read`` / ``sweep_rw`` / ``sweep_flat`` at 35B TP1 B = 256 (the target cell):
   dv tile 16..128 x warps x stages 1-4, one program per tile vs persistent, programs per
   SM, TMA, wider key chunks, no slot / no mask; the read-read-write pattern likewise;
   flat blocks;
3. ``best``: the fastest tile launches of the sweeps again at 397B TP8 B = 256 and 35B
   B = 64.

A compile warm-up (``--workers`` processes filling Triton's cache) runs first, up to
WARM_SHARE of the budget. The ``--budget-s`` guard stops before a launch that would end
past the budget; the CSV, the metadata and the markdown table are rewritten (atomically)
after every launch, so a cut run still leaves what it measured. Writes
DIR/round13_stream_ceiling.csv, DIR/round13_stream_meta.json, DIR/round13_stream_table.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import bench_harness as bh
from .bench_harness import Budget
from .stream_kernels import ONE_PER_TILE, StreamSpec, make_inputs, prepare

PREFIX = "round13_stream"
# (preset, tp, B): the target cell first
CELLS = (("qwen3.5-35b-a3b", 1, 256), ("qwen3.5-397b-a17b", 8, 256), ("qwen3.5-35b-a3b", 1, 64),
         ("qwen3.5-397b-a17b", 8, 64), ("qwen3.5-35b-a3b", 1, 1), ("qwen3.5-397b-a17b", 8, 1))
DRY_CELLS = (("qwen3.5-397b-a17b", 8, 2),)  # the interpreter: 2 requests
WARM_SHARE = 0.45
COLUMNS = ("group", "variant", "family", "tag", "model_shape", "B", "bv", "bkc", "num_warps",
           "num_stages", "grid", "programs", "ctas_per_sm", "regs", "spills", "smem_bytes", "tma",
           "bytes_read", "bytes_written", "bytes", "p20_us", "p50_us", "p80_us", "gbps",
           "frac_copy", "frac_copy_same", "check_ok", "check_err", "note")  # fmt: skip

# the real launches (gdn/variants.py; programs per SM at T = 4 from NOTES.md section 18)
PIPE_R = StreamSpec("tile_read", 64, 32, 4, 2, ctas_per_sm=5, pick_bv=True, tag="pipe_r")
PIPE_RE = StreamSpec("tile_read", 64, 32, 4, 2, ctas_per_sm=4, pick_bv=True, tag="pipe_re")
PIPE_ZW1P = StreamSpec("tile_rw", 16, 32, 1, 3, ctas_per_sm=12, tma=True, pick_bv=True,
                       tag="pipe_zw1p")  # fmt: skip


def matched_specs() -> list[StreamSpec]:
    """Group ``matched``: the references, the real launches' patterns, the flat streams."""
    return [StreamSpec("torch_copy"), StreamSpec("torch_sum"), StreamSpec("torch_add"),
            PIPE_R, PIPE_RE, StreamSpec("tile_read", 64, 32, 4, 2, pick_bv=True, tag="pipe_r"),
            PIPE_ZW1P, StreamSpec("tile_rw", 16, 32, 1, 3, tma=True, pick_bv=True,
                                  tag="pipe_zw1p"),
            StreamSpec("flat_read", num_warps=4, stages=1, ctas_per_sm=ONE_PER_TILE, block=2048),
            StreamSpec("flat_rw", num_warps=4, stages=1, ctas_per_sm=ONE_PER_TILE,
                       block=2048)]  # fmt: skip


def sweep_read_specs() -> list[StreamSpec]:
    """Group ``sweep_read``: the verify pattern's tilings (persistent, as many as reside)."""
    specs = [StreamSpec("tile_read", bv, 32, w, s) for bv in (16, 32, 64, 128)
             for w in (2, 4, 8) for s in (1, 2, 3, 4)]  # fmt: skip
    specs += [StreamSpec("tile_read", bv, 32, w, 1, ctas_per_sm=ONE_PER_TILE)
              for bv in (16, 32, 64, 128) for w in (2, 4, 8)]  # fmt: skip
    specs += [StreamSpec("tile_read", 64, 32, 4, 2, ctas_per_sm=c)
              for c in (1, 2, 3, 4, 6, 8, 12, 16)]  # fmt: skip
    specs += [StreamSpec("tile_read", bv, 32, 4, s, tma=True) for bv in (16, 32, 64, 128)
              for s in (2, 3)]  # fmt: skip
    specs += [StreamSpec("tile_read", bv, kc, 4, 2) for bv in (16, 32, 64) for kc in (64, 128)]
    specs += [StreamSpec("tile_read", 64, 32, 4, 2, slot=False),
              StreamSpec("tile_read", 64, 32, 4, 2, mask=False)]  # fmt: skip
    return specs


def sweep_rw_specs() -> list[StreamSpec]:
    """Group ``sweep_rw``: the deferred commit's read-read-write pattern."""
    specs = [StreamSpec("tile_rw", bv, 32, w, s, tma=t) for t in (True, False)
             for bv in (16, 32, 64) for w in (1, 2, 4) for s in (2, 3)]  # fmt: skip
    specs += [StreamSpec("tile_rw", 16, 32, 1, 3, tma=True, pending=False)]
    specs += [StreamSpec("tile_rw", 16, 32, 1, 3, tma=True, ctas_per_sm=c) for c in (4, 8, 16)]
    specs += [StreamSpec("tile_rw", bv, 32, 4, 1, ctas_per_sm=ONE_PER_TILE) for bv in (16, 32, 64)]
    return specs


def sweep_flat_specs() -> list[StreamSpec]:
    """Group ``sweep_flat``: the contiguous best case."""
    specs = [StreamSpec("flat_read", num_warps=w, stages=1, ctas_per_sm=ONE_PER_TILE, block=b)
             for b in (1024, 4096, 8192) for w in (4, 8)]  # fmt: skip
    specs += [StreamSpec("flat_read", num_warps=w, stages=s, block=4096) for w in (4, 8)
              for s in (1, 2, 3)]  # fmt: skip
    specs += [StreamSpec("flat_rw", num_warps=w, stages=1, ctas_per_sm=ONE_PER_TILE, block=b)
              for b in (1024, 4096) for w in (4, 8)]  # fmt: skip
    return specs


@dataclass(frozen=True)
class Item:
    group: str
    cell: tuple[str, int, int]
    spec: StreamSpec


def static_plan(cells=CELLS) -> list[Item]:
    """Every launch known before the run, in priority order (``best`` is added during it)."""
    items = [Item("matched", c, s) for c in cells for s in matched_specs()]
    target = cells[0]
    for group, specs in (("sweep_read", sweep_read_specs()), ("sweep_rw", sweep_rw_specs()),
                         ("sweep_flat", sweep_flat_specs())):  # fmt: skip
        items += [Item(group, target, s) for s in specs]
    return items


def best_items(rows: list[dict], plan: list[Item], cells=CELLS, n_read: int = 4,
               n_rw: int = 3) -> list[Item]:  # fmt: skip
    """Group ``best``: the fastest ``n_read`` tile_read and ``n_rw`` tile_rw launches of the
    sweeps (by GB/s at the target cell), at the other B = 256 cell and the target shape's
    B = 64 (those present in ``cells``)."""
    by_label = {it.spec.label(): it.spec for it in plan}
    others = [c for c in cells[1:] if c[2] == 256 or (c[:2] == cells[0][:2] and c[2] == 64)]
    out: list[Item] = []
    for group, n in (("sweep_read", n_read), ("sweep_rw", n_rw)):
        timed = sorted((r for r in rows if r["group"] == group and r["gbps"] != ""),
                       key=lambda r: -float(r["gbps"]))[:n]  # fmt: skip
        out += [Item("best", c, by_label[r["variant"]]) for c in others for r in timed]
    return out


# ------------------------------------------------------------------------------ measuring
def _shape(cell):
    from .shapes import gdn_shape

    return gdn_shape(cell[0], cell[1])


def _base_row(item: Item, shape_name: str) -> dict:
    s = item.spec
    tile = s.family.startswith("tile")
    grid = {0: "persistent", ONE_PER_TILE: "one_per_tile"}.get(s.ctas_per_sm, "persistent")
    return dict.fromkeys(COLUMNS, "") | {
        "group": item.group, "variant": s.label(), "family": s.family, "tag": s.tag,
        "model_shape": shape_name, "B": item.cell[2], "bkc": s.bkc if tile else "",
        "num_warps": "" if s.family.startswith("torch") else s.num_warps,
        "num_stages": "" if s.family.startswith("torch") else s.stages,
        "grid": "" if s.family.startswith("torch") else grid, "tma": s.tma if tile else "",
    }  # fmt: skip


def measure(item: Item, inp, timer, copy_gbps: float, copy_same_gbps: float | None) -> dict:
    """One row: the launch prepared (compiled), checked once, then timed; a launch that does
    not fit the shape, fails to build or fails its check is noted and not timed."""
    row = _base_row(item, inp.shape.name)
    try:
        launch = prepare(item.spec, inp)
        ok, err = launch.check()
    except ValueError as exc:
        return row | {"note": f"skipped: {exc}"}
    except Exception as exc:  # a compile or launch failure: noted, the sweep goes on
        return row | {"note": f"error: {type(exc).__name__}: {str(exc)[:200]}"}
    row |= {"bytes_read": launch.bytes_read, "bytes_written": launch.bytes_written,
            "bytes": launch.bytes_read + launch.bytes_written, "check_ok": ok,
            "check_err": f"{err:.3g}"}  # fmt: skip
    if item.spec.family.startswith(("tile", "flat")):
        row |= {"programs": launch.programs, "ctas_per_sm": launch.ctas_per_sm,
                "regs": launch.regs, "spills": launch.spills,
                "smem_bytes": launch.smem_bytes}  # fmt: skip
        if item.spec.family.startswith("tile"):
            row["bv"] = launch.bv
    if not ok:
        return row | {"note": "check failed: not timed"}
    p20, p50, p80 = timer(launch.fn)
    gbps = row["bytes"] / (p50 * 1e-6) / 1e9
    row |= {"p20_us": f"{p20:.2f}", "p50_us": f"{p50:.2f}", "p80_us": f"{p80:.2f}",
            "gbps": f"{gbps:.1f}", "frac_copy": f"{gbps / copy_gbps:.3f}"}  # fmt: skip
    if copy_same_gbps:
        row["frac_copy_same"] = f"{gbps / copy_same_gbps:.3f}"
    return row


class Runner:
    """Measures plan items in order under the budget; keeps each cell's inputs and torch
    copy bandwidth; rewrites the outputs after every row (``save``)."""

    def __init__(self, device: str, timer, copy_gbps: float, budget: Budget,
                 save: Callable[[list[dict]], None], integer: bool = False):  # fmt: skip
        self.device, self.timer, self.copy_gbps, self.budget = device, timer, copy_gbps, budget
        self.save, self.integer = save, integer
        self.inputs: dict = {}
        self.copy_same: dict = {}
        self.rows: list[dict] = []
        self.not_reached: list[str] = []

    def run(self, items: list[Item]) -> None:
        for n, item in enumerate(items):
            if not self.budget.allows():
                self.not_reached += [f"{it.group} {it.cell[0]} B={it.cell[2]} {it.spec.label()}"
                                     for it in items[n:]]  # fmt: skip
                return
            t1 = self.budget.clock()
            if item.cell not in self.inputs:
                self.inputs[item.cell] = make_inputs(_shape(item.cell), item.cell[2],
                                                     device=self.device, integer=self.integer)
            row = measure(item, self.inputs[item.cell], self.timer, self.copy_gbps,
                          self.copy_same.get(item.cell))  # fmt: skip
            if item.spec.family == "torch_copy" and row["gbps"]:
                self.copy_same[item.cell] = float(row["gbps"])
                row["frac_copy_same"] = "1.000"
            self.rows.append(row)
            self.budget.record(self.budget.clock() - t1)
            self.save(self.rows)
            print(f"{self.budget.elapsed():6.1f}s {row['group']} {row['model_shape']} B={row['B']} "
                  f"{row['variant']}: {row['p50_us'] or row['note']} us, {row['gbps']} GB/s, "
                  f"x copy {row['frac_copy']}", flush=True)  # fmt: skip


# ------------------------------------------------------------------------------ outputs
TABLE_HEAD = (
    "| group | variant | shape | B | MB | p50 us | GB/s | x copy (2 GiB) | x copy (same bytes) "
    "| programs / SM | regs (spills) | smem KB |\n" + "|---" * 12 + "|"
)


def _table_line(r: dict) -> str:
    mb = f"{int(r['bytes']) / 1e6:.1f}" if r["bytes"] != "" else ""
    smem = f"{int(r['smem_bytes']) / 1024:.1f}" if r["smem_bytes"] not in ("", 0) else ""
    regs = f"{r['regs']}"
    if r["spills"] not in ("", 0, "0"):
        regs += f" ({r['spills']})"
    us = r["p50_us"] or (r["note"][:60] if r["note"] else "")
    return (f"| {r['group']} | {r['variant']} | {r['model_shape']} | {r['B']} | {mb} | {us} "
            f"| {r['gbps']} | {r['frac_copy']} | {r['frac_copy_same']} | {r['ctas_per_sm']} "
            f"| {regs} | {smem} |")  # fmt: skip


def best_rows(rows: list[dict]) -> list[dict]:
    """The fastest timed row (GB/s) per (shape, B, family), in first-seen order."""
    best: dict[tuple, dict] = {}
    for r in rows:
        if r["gbps"] == "":
            continue
        key = (r["model_shape"], r["B"], r["family"])
        if key not in best or float(r["gbps"]) > float(best[key]["gbps"]):
            best[key] = r
    return list(best.values())


def render_table(rows: list[dict], copy_gbps: float) -> str:
    """The markdown report: the best row per (shape, B, family), then every row."""
    return "\n".join([
        f"# Round 13: GDN state stream ceiling (copy bandwidth {copy_gbps:.1f} GB/s, "
        "2 GiB device-to-device, read + write)", "",
        "GB/s = (bytes read + bytes written) / p50; x copy = GB/s / copy bandwidth.", "",
        "## Best per (shape, B, family)", "", TABLE_HEAD, *map(_table_line, best_rows(rows)), "",
        f"## Every launch ({len(rows)} rows)", "", TABLE_HEAD, *map(_table_line, rows), "",
    ])  # fmt: skip


def save_outputs(out: Path, rows: list[dict], meta: dict) -> None:
    """CSV, markdown table and metadata, each written atomically."""
    bh.write_outputs(out, PREFIX, f"{PREFIX}_ceiling.csv", rows, COLUMNS,
                  render_table(rows, meta["copy_gbps"]), meta)  # fmt: skip


# ------------------------------------------------------------------------------ warm-up
def warm_items(plan: list[Item]) -> list[Item]:
    """One plan item per distinct compile (spec without its grid size or tag, at the dv
    tile it resolves to), in plan order; no torch references."""
    import dataclasses

    from ...gdn_verify._jit import pick_block_v

    seen, out = set(), []
    for it in plan:
        s = it.spec
        if s.family.startswith("torch"):
            continue
        sh = _shape(it.cell)
        bv = pick_block_v(it.cell[2] * sh.num_v_heads, sh.dv, widest=s.bv) if s.pick_bv else s.bv
        key = (dataclasses.replace(s, ctas_per_sm=min(s.ctas_per_sm, 0), tag="", bv=bv,
                                   pick_bv=False), sh.num_v_heads, it.cell[2] > 1)  # fmt: skip
        if key not in seen:
            seen.add(key)
            out.append(it)
    return out


def warm_worker(spec: str, dry: bool) -> int:
    """Worker ``i/n``: compile (and run once) its share of the distinct launches."""
    inputs: dict = {}

    def launch(it: Item) -> None:
        if it.cell not in inputs:
            inputs[it.cell] = make_inputs(_shape(it.cell), it.cell[2],
                                          device="cpu" if dry else "cuda")  # fmt: skip
        prepare(it.spec, inputs[it.cell]).fn()

    return bh.run_warm_share(spec, warm_items(static_plan(DRY_CELLS if dry else CELLS)), launch)


# ------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    flags = bh.base_parser(__doc__, 100.0, 12, "matched,sweep_read,sweep_rw,sweep_flat,best",
                           "the CPU interpreter, tiny cells")  # fmt: skip
    begun = bh.begin(argv, flags, warm_worker, Runner, save_outputs, module=__spec__.name,
                     name="capsim_kernels.bench.gdn.stream_ceiling", warm_share=WARM_SHARE,
                     bytes_note="unique bytes read + written per launch; x copy = GB/s / copy_gbps "
                     "(timing.measure_copy_gbps, 2 GiB, read + write); x copy (same bytes) = GB/s "
                     "/ the torch_copy row of the same cell")  # fmt: skip
    if isinstance(begun, int):
        return begun
    args, meta, runner = begun
    cells = DRY_CELLS if args.dry_run else CELLS
    groups = args.groups.split(",")
    plan = [it for it in static_plan(cells) if it.group in groups]
    runner.run(plan)
    if "best" in groups and not runner.not_reached:
        runner.run(best_items(runner.rows, plan, cells))
    meta |= bh.end_fields(runner.budget, runner.not_reached, 40)
    save_outputs(args.out, runner.rows, meta)
    print(render_table(best_rows(runner.rows), meta["copy_gbps"]).split("## Every")[0], flush=True)
    bh.print_summary(PREFIX, meta, runner.not_reached)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
