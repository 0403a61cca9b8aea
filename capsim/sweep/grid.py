"""A sweep grid: which points to simulate, expanded into SimConfigs (TOML: ``grid_toml``).

A grid is a list of blocks. Each block is a cartesian product::

    deployments (model, gpu, tp, gmu list) x workloads (name, load mode, loads)
        x tree shapes (None = the k-deep chain) x commit modes

Every point of one block that differs only in the commit mode forms one *matched point*
(same ``match_id``). All points use the sweep's one seed: the same request sample and the
same per-request acceptance draws at every load and in every mode (common random numbers
across the whole grid), so differences between points come from the load or the mode,
never from sampling noise.

Invariants: a point's ``point_id`` is a hash of its full ``SimConfig`` (plus the record
schema version), so identical configs always map to the same file whatever grid produced
them; ``match_id`` is the same hash with the commit mode removed.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from capsim.commit_modes import COMMIT_MODES
from capsim.config import (
    AcceptanceConfig,
    EngineConfig,
    LoadConfig,
    SimConfig,
    SpecDecodeConfig,
)
from capsim.draft_rank import MAX_TEMPERATURE, TREE_MODELS

RECORD_SCHEMA = 1
"""Bump when a point record's meaning changes: old point files then stop matching."""

LoadMode = Literal["concurrency", "rate"]

PUBLISHED_GRID = Path(__file__).resolve().parents[2] / "experiments" / "published.toml"


def _fail(owner: str, name: str, value: object, why: str) -> None:
    raise ValueError(f"{owner}.{name}={value!r}: {why}")


DEPLOYMENT_FIELDS_OMITTED_AT_DEFAULT: dict[str, Any] = {"quantization": None}
"""``Deployment`` fields newer than the sweep fingerprints -> their default (left out of
``SweepSpec.to_dict`` at that default)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    """One model served on one GPU type at one TP size, at several gmu values."""

    model: str = field(metadata={"help": "model preset"})
    gpu: str = field(metadata={"help": "GPU preset"})
    tp: int = field(default=1, metadata={"help": "tensor-parallel size"})
    gmu: tuple[float, ...] = field(metadata={"help": "gpu_memory_utilization values"})
    # vLLM's pool-shaping flags (issue 11); TOML keys of the same names.
    vllm_version: str = field(default="0.33", metadata={"help": "vLLM release to mirror"})
    kv_cache_memory_bytes: int | None = field(
        default=None, metadata={"help": "vLLM --kv-cache-memory: pin the pool (gmu ignored)"}
    )
    num_gpu_blocks_override: int | None = field(
        default=None, metadata={"help": "vLLM --num-gpu-blocks-override"}
    )
    limit_mm_per_prompt: int | None = field(
        default=None, metadata={"help": "images per prompt (0: text only)"}
    )
    enforce_eager: bool = field(default=False, metadata={"help": "no CUDA graphs"})
    quantization: str | None = field(
        default=None,
        metadata={"help": "vLLM --quantization (None: the checkpoint's quantization_config)"},
    )

    def engine(self, gmu: float, enable_prefix_caching: bool = False) -> EngineConfig:
        """The EngineConfig of this deployment at one gmu (validates the pool flags)."""
        return EngineConfig(
            tp=self.tp,
            gmu=gmu,
            enable_prefix_caching=enable_prefix_caching,
            vllm_version=self.vllm_version,
            kv_cache_memory_bytes=self.kv_cache_memory_bytes,
            num_gpu_blocks_override=self.num_gpu_blocks_override,
            limit_mm_per_prompt=self.limit_mm_per_prompt,
            enforce_eager=self.enforce_eager,
            quantization=self.quantization,
        )

    def __post_init__(self) -> None:
        object.__setattr__(self, "gmu", tuple(float(g) for g in self.gmu))
        if not isinstance(self.tp, int) or self.tp < 1:
            _fail("deployment", "tp", self.tp, "must be an int >= 1")
        if not self.gmu:
            _fail("deployment", "gmu", self.gmu, "must list at least one value")
        for g in self.gmu:
            if not 0.0 < g <= 1.0:
                _fail("deployment", "gmu", self.gmu, "every value must be in (0, 1]")
        self.engine(self.gmu[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadLoads:
    """A workload offered at several loads: fixed concurrencies or arrival rates."""

    name: str = field(metadata={"help": "workload name (capsim.traces.WORKLOADS)"})
    mode: LoadMode = field(default="concurrency", metadata={"help": "concurrency | rate"})
    loads: tuple[float, ...] = field(metadata={"help": "concurrencies or req/s"})
    burstiness: float = field(default=1.0, metadata={"help": "gamma shape (rate mode)"})
    requests_per_concurrency: float | None = field(
        default=None, metadata={"help": "overrides the sweep's rule for this workload"}
    )
    min_requests: int | None = field(
        default=None, metadata={"help": "overrides the sweep's lower clamp for this workload"}
    )
    acceptance: tuple[float, ...] | None = field(
        default=None,
        metadata={
            "help": "per-depth conditional draft acceptance for this workload "
            "(None = AcceptanceConfig's default, 3.2 tokens/step at k=3)"
        },
    )

    def __post_init__(self) -> None:
        if self.acceptance is not None:
            acc = tuple(float(p) for p in self.acceptance)
            AcceptanceConfig(conditional=acc)  # validates: raises naming the values
            object.__setattr__(self, "acceptance", acc)
        if self.mode not in ("concurrency", "rate"):
            _fail("workload", "mode", self.mode, "must be 'concurrency' or 'rate'")
        loads = tuple(float(x) for x in self.loads)
        if not loads:
            _fail("workload", "loads", self.loads, f"workload {self.name!r} lists no loads")
        for x in loads:
            if not (math.isfinite(x) and x > 0):
                _fail("workload", "loads", self.loads, "every load must be finite and > 0")
            if self.mode == "concurrency" and x != int(x):
                _fail("workload", "loads", self.loads, "concurrencies must be integers")
        object.__setattr__(self, "loads", loads)
        if self.requests_per_concurrency is not None and not self.requests_per_concurrency > 0:
            _fail("workload", "requests_per_concurrency", self.requests_per_concurrency, "> 0")
        if self.min_requests is not None and self.min_requests < 1:
            _fail("workload", "min_requests", self.min_requests, "must be >= 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """deployments x workloads x tree shapes (x the sweep's commit modes)."""

    name: str = field(metadata={"help": "block name, e.g. 'main' or 'trees'"})
    deployments: tuple[Deployment, ...]
    workloads: tuple[WorkloadLoads, ...]
    trees: tuple[tuple[int, ...] | None, ...] = field(
        default=(None,), metadata={"help": "tree widths; None = the chain of num_spec_tok"}
    )
    prefix_caching: tuple[bool, ...] = field(
        default=(False,),
        metadata={"help": "vLLM --enable-prefix-caching values (True = GDN 'align' mode)"},
    )

    def __post_init__(self) -> None:
        if not self.prefix_caching or any(not isinstance(v, bool) for v in self.prefix_caching):
            _fail("block", "prefix_caching", self.prefix_caching, "must list true/false values")
        if not self.deployments:
            _fail("block", "deployments", self.deployments, f"block {self.name!r} is empty")
        if not self.workloads:
            _fail("block", "workloads", self.workloads, f"block {self.name!r} is empty")
        if not self.trees:
            _fail("block", "trees", self.trees, "use (None,) for the chain")
        object.__setattr__(
            self,
            "trees",
            tuple(None if t is None else tuple(int(w) for w in t) for t in self.trees),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepSpec:
    """The whole grid plus what every point shares."""

    name: str = field(default="sweep", metadata={"help": "grid name"})
    blocks: tuple[Block, ...]
    commit_modes: tuple[str, ...] = field(default=("storeall", "reconstruct"))
    num_spec_tok: int = field(default=3, metadata={"help": "chain depth k"})
    num_requests: int | None = field(
        default=None, metadata={"help": "requests per point; None = the per-load rule below"}
    )
    requests_per_concurrency: float = field(
        default=3.0, metadata={"help": "closed loop: requests = this x concurrency"}
    )
    rate_window_s: float = field(
        default=20.0, metadata={"help": "open loop: requests = rate x this many seconds"}
    )
    min_requests: int = field(default=16, metadata={"help": "lower clamp of the rule"})
    max_requests: int = field(default=1000, metadata={"help": "upper clamp (vllm bench: 1000)"})
    seed: int = field(default=0, metadata={"help": "root seed of every point"})
    step_time: str = field(default="calibrated", metadata={"help": "step-time model"})
    tree_model: str = field(
        default="rank", metadata={"help": "draft-tree acceptance: rank | independent (bound)"}
    )
    temperature: float = field(default=0.0, metadata={"help": "verification temperature"})

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> list[str]:
        """Every invalid field, one 'sweep.FIELD=VALUE: why' line each (empty = valid)."""
        out: list[str] = []

        def bad(name: str, value: object, why: str) -> None:
            out.append(f"sweep.{name}={value!r}: {why}")

        if self.tree_model not in TREE_MODELS:
            bad("tree_model", self.tree_model, f"must be one of {TREE_MODELS}")
        if not (
            type(self.temperature) in (int, float)
            and math.isfinite(self.temperature)
            and 0.0 <= self.temperature <= MAX_TEMPERATURE
        ):
            bad("temperature", self.temperature, f"must be in [0, {MAX_TEMPERATURE}]")
        if not self.commit_modes:
            bad("commit_modes", self.commit_modes, "list at least one mode")
        for m in self.commit_modes:
            if m not in COMMIT_MODES:
                bad("commit_modes", self.commit_modes, f"{m!r} not in {COMMIT_MODES}")
        if len(set(self.commit_modes)) != len(self.commit_modes):
            bad("commit_modes", self.commit_modes, "duplicate mode")
        if self.num_requests is not None and (
            not isinstance(self.num_requests, int) or self.num_requests < 1
        ):
            bad("num_requests", self.num_requests, "must be None or an int >= 1")
        if not self.requests_per_concurrency > 0:
            bad("requests_per_concurrency", self.requests_per_concurrency, "must be > 0")
        if not self.rate_window_s > 0:
            bad("rate_window_s", self.rate_window_s, "must be > 0")
        if not 1 <= self.min_requests <= self.max_requests:
            bad("min_requests", self.min_requests, "need 1 <= min <= max_requests")
        if not isinstance(self.seed, int) or self.seed < 0:
            bad("seed", self.seed, "must be an int >= 0")
        if not self.blocks:
            bad("blocks", self.blocks, "the grid is empty")
        return out

    def requests_for(self, mode: str, load: float, workload: WorkloadLoads | None = None) -> int:
        """Requests simulated at one load.

        ``num_requests`` if set; otherwise ``requests_per_concurrency x concurrency``
        (closed loop: every client slot sends about that many requests, so the steady state
        dominates the initial burst) or ``rate x rate_window_s`` (open loop), clamped to
        [min_requests, max_requests]. Simulation cost grows with total output tokens /
        concurrency, so a fixed 1000 (vllm bench's default) would spend most of a sweep at
        concurrency 1 (measured: see experiments/published.toml).
        """
        if self.num_requests is not None:
            return self.num_requests
        per_conc = self.requests_per_concurrency
        low = self.min_requests
        if workload is not None:
            if workload.requests_per_concurrency is not None:
                per_conc = workload.requests_per_concurrency
            if workload.min_requests is not None:
                low = workload.min_requests
        per = per_conc if mode == "concurrency" else self.rate_window_s
        return int(min(self.max_requests, max(low, math.ceil(per * load))))

    def to_dict(self) -> dict[str, Any]:
        """``asdict``, less the Deployment fields added since sweep fingerprints were
        fixed while at their defaults (``quantization``): an old sweep still resumes."""
        d = asdict(self)
        for block in d["blocks"]:
            for dep in block["deployments"]:
                for name, default in DEPLOYMENT_FIELDS_OMITTED_AT_DEFAULT.items():
                    if dep.get(name, default) == default:
                        dep.pop(name, None)
        return d

    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of this spec: two sweeps resume together iff equal."""
        return _sha(self.to_dict())


@dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    """One simulation of the grid."""

    point_id: str
    match_id: str
    block: str
    cfg: SimConfig

    def keys(self) -> dict[str, Any]:
        """The columns that identify the point in result tables."""
        c = self.cfg
        tree = c.spec.tree_widths
        return {
            "point_id": self.point_id,
            "match_id": self.match_id,
            "block": self.block,
            "model": c.model,
            "gpu": c.gpu,
            "tp": c.engine.tp,
            "gmu": float(c.engine.gmu),
            "workload": c.workload,
            "load_mode": c.load.mode,
            "load": float(c.load.offered_load),
            "tree": "chain" if tree is None else "x".join(str(w) for w in tree),
            "tree_model": c.spec.acceptance.tree_model,
            "temperature": float(c.spec.acceptance.temperature),
            "num_spec_tok": c.spec.num_spec_tok,
            "commit": c.spec.commit,
            "prefix_caching": bool(c.engine.enable_prefix_caching),
            "num_requests_offered": c.load.num_requests,
            "seed": c.seed,
        }


def _sha(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def point_id_of(cfg: SimConfig) -> str:
    return _sha({"schema": RECORD_SCHEMA, "cfg": cfg.to_dict()})[:16]


def match_id_of(cfg: SimConfig) -> str:
    d = cfg.to_dict()
    d["spec"].pop("commit")
    return _sha({"schema": RECORD_SCHEMA, "cfg": d})[:16]


POOL_KEYS: tuple[str, ...] = (
    "vllm_version",
    "kv_cache_memory_bytes",
    "num_gpu_blocks_override",
    "limit_mm_per_prompt",
    "enforce_eager",
    "quantization",
)


def with_pool(spec: SweepSpec, pool: dict[str, Any]) -> SweepSpec:
    """Every deployment of ``spec`` with the given pool flags (CLI overrides of the TOML)."""
    upd = {k: v for k, v in pool.items() if v is not None and k in POOL_KEYS}
    if not upd:
        return spec
    blocks = tuple(
        replace(b, deployments=tuple(replace(d, **upd) for d in b.deployments)) for b in spec.blocks
    )
    return replace(spec, blocks=blocks)


def make_config(
    spec: SweepSpec,
    dep: Deployment,
    gmu: float,
    wl: WorkloadLoads,
    load: float,
    tree: tuple[int, ...] | None,
    commit: str,
    *,
    num_requests: int | None = None,
    prefix_caching: bool = False,
) -> SimConfig:
    """The SimConfig of one grid cell."""
    n = num_requests or spec.requests_for(wl.mode, load, wl)
    if wl.mode == "concurrency":
        load_cfg = LoadConfig(mode="concurrency", concurrency=int(load), num_requests=n)
    else:
        load_cfg = LoadConfig(
            mode="rate", rate_req_per_s=float(load), burstiness=wl.burstiness, num_requests=n
        )
    return SimConfig(
        model=dep.model,
        gpu=dep.gpu,
        engine=dep.engine(gmu, enable_prefix_caching=prefix_caching),
        spec=SpecDecodeConfig(
            num_spec_tok=spec.num_spec_tok,
            tree_widths=tree,
            commit=commit,  # type: ignore[arg-type]
            acceptance=AcceptanceConfig(
                conditional=wl.acceptance or AcceptanceConfig().conditional,
                tree_model=spec.tree_model,
                temperature=spec.temperature,
            ),
        ),
        workload=wl.name,
        load=load_cfg,
        seed=spec.seed,
        step_time=spec.step_time,
    )


def expand(spec: SweepSpec) -> list[Point]:
    """Every point of the grid, in a stable order; duplicates (same config) appear once."""
    points: list[Point] = []
    seen: set[str] = set()
    for block in spec.blocks:
        for dep in block.deployments:
            for gmu in dep.gmu:
                for wl in block.workloads:
                    for load in wl.loads:
                        for tree in block.trees:
                            for pc in block.prefix_caching:
                                for commit in spec.commit_modes:
                                    cfg = make_config(
                                        spec, dep, gmu, wl, load, tree, commit, prefix_caching=pc
                                    )
                                    pid = point_id_of(cfg)
                                    if pid in seen:
                                        continue
                                    seen.add(pid)
                                    points.append(
                                        Point(
                                            point_id=pid,
                                            match_id=match_id_of(cfg),
                                            block=block.name,
                                            cfg=cfg,
                                        )
                                    )
    if not points:
        raise ValueError("sweep: the grid expands to no points")
    return points


# ---------------------------------------------------------------------------------- TOML


def restrict(
    spec: SweepSpec,
    *,
    gmu: tuple[float, ...] | None = None,
    models: tuple[str, ...] | None = None,
    workloads: tuple[str, ...] | None = None,
    trees: bool = True,
    commit_modes: tuple[str, ...] | None = None,
    num_requests: int | None = None,
    seed: int | None = None,
    step_time: str | None = None,
    prefix_caching: bool | None = None,
) -> SweepSpec:
    """A sub-grid: keep only the given gmu values / models / workloads; ``prefix_caching``
    (when given) replaces every block's prefix-caching values.

    ``gmu`` filters each deployment's own list (the published grid runs the 397B model at
    0.75 and 0.9 only, so ``--gmu 0.6,0.75,0.9`` keeps exactly the published points).
    Deployments, workloads or blocks left empty are dropped; a grid left empty raises.
    """
    blocks = []
    for block in spec.blocks:
        deps = []
        for dep in block.deployments:
            if models is not None and dep.model not in models:
                continue
            keep = dep.gmu if gmu is None else tuple(g for g in dep.gmu if _in(g, gmu))
            if keep:
                deps.append(replace(dep, gmu=keep))
        wls = [w for w in block.workloads if workloads is None or w.name in workloads]
        if not trees and block.trees != (None,):
            continue
        if deps and wls:
            pc = block.prefix_caching if prefix_caching is None else (prefix_caching,)
            blocks.append(
                replace(block, deployments=tuple(deps), workloads=tuple(wls), prefix_caching=pc)
            )
    if not blocks:
        raise ValueError(
            "sweep: the selection leaves an empty grid "
            f"(gmu={gmu}, models={models}, workloads={workloads}); the grid has gmu "
            f"{sorted({g for b in spec.blocks for d in b.deployments for g in d.gmu})}, "
            f"models {sorted({d.model for b in spec.blocks for d in b.deployments})}, "
            f"workloads {sorted({w.name for b in spec.blocks for w in b.workloads})}"
        )
    changes: dict[str, Any] = {"blocks": tuple(blocks)}
    if commit_modes is not None:
        changes["commit_modes"] = commit_modes
    if num_requests is not None:
        changes["num_requests"] = num_requests
    if seed is not None:
        changes["seed"] = seed
    if step_time is not None:
        changes["step_time"] = step_time
    return replace(spec, **changes)


def _in(value: float, values: tuple[float, ...]) -> bool:
    return any(abs(value - v) < 1e-9 for v in values)
