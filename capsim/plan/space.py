"""The candidate set: the cross product of a ``SearchSpace``, one ``Candidate`` per row.

A candidate is a whole replica deployment except the load and the replica count. k = 0
(speculation off) has no commit mode (verify never runs): it appears once, as ``off``.
A tree sets its own depth, so trees are not crossed with ``ks``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig
from capsim.plan.inputs import SearchSpace


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One replica deployment to search (hashable, picklable)."""

    model: str
    gpu: str
    tp: int
    gmu: float
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    num_spec_tok: int
    tree: tuple[int, ...] | None
    commit: str
    enable_prefix_caching: bool
    kv_cache_dtype: str
    max_model_len: int | None
    step_time: str = "calibrated"
    pool: tuple[tuple[str, object], ...] = ()
    """vLLM pool flags as (EngineConfig field, value) pairs (--vllm-version, --kv-cache-memory)."""

    @property
    def spec_label(self) -> str:
        if self.num_spec_tok == 0:
            return "off"
        shape = (
            f"k={self.num_spec_tok}"
            if self.tree is None
            else "tree " + "x".join(map(str, self.tree))
        )
        return f"{shape} {self.commit}"

    @property
    def cand_id(self) -> str:
        """A readable, unique id (every field that differs between candidates)."""
        parts = [
            self.gpu,
            f"tp{self.tp}",
            f"gmu{self.gmu:g}",
            f"seqs{self.max_num_seqs or 'def'}",
            f"mnbt{self.max_num_batched_tokens or 'def'}",
            "off"
            if self.num_spec_tok == 0
            else (
                f"k{self.num_spec_tok}"
                if self.tree is None
                else "t" + "x".join(map(str, self.tree))
            ),
            "" if self.num_spec_tok == 0 else self.commit,
            "pc" if self.enable_prefix_caching else "",
            "" if self.kv_cache_dtype == "bfloat16" else self.kv_cache_dtype,
        ]
        return "-".join(p for p in parts if p)

    def engine(self) -> EngineConfig:
        return EngineConfig(
            tp=self.tp,
            gmu=self.gmu,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_model_len=self.max_model_len,
            enable_prefix_caching=self.enable_prefix_caching,
            kv_cache_dtype=self.kv_cache_dtype,
            **dict(self.pool),  # type: ignore[arg-type]
        )

    def spec(self) -> SpecDecodeConfig:
        return SpecDecodeConfig(
            num_spec_tok=self.num_spec_tok,
            tree_widths=self.tree,
            commit=self.commit,  # type: ignore[arg-type]
        )

    def sim_config(
        self,
        *,
        workload: str,
        rate_req_per_s: float,
        num_requests: int,
        burstiness: float = 1.0,
        seed: int = 0,
        step_time: str | None = None,
    ) -> SimConfig:
        return SimConfig(
            model=self.model,
            gpu=self.gpu,
            engine=self.engine(),
            spec=self.spec(),
            workload=workload,
            load=LoadConfig(
                mode="rate",
                rate_req_per_s=float(rate_req_per_s),
                burstiness=float(burstiness),
                num_requests=int(num_requests),
            ),
            seed=seed,
            step_time=step_time or self.step_time,
        )

    def with_step_time(self, step_time: str) -> Candidate:
        return replace(self, step_time=step_time)

    def keys(self) -> dict[str, object]:
        """Flat columns for the candidates table."""
        return {
            "cand_id": self.cand_id,
            "model": self.model,
            "gpu": self.gpu,
            "tp": self.tp,
            "gmu": self.gmu,
            "max_num_seqs": -1 if self.max_num_seqs is None else self.max_num_seqs,
            "max_num_batched_tokens": -1
            if self.max_num_batched_tokens is None
            else self.max_num_batched_tokens,
            "num_spec_tok": self.num_spec_tok,
            "tree": "chain" if self.tree is None else "x".join(map(str, self.tree)),
            "commit": "off" if self.num_spec_tok == 0 else self.commit,
            "spec": self.spec_label,
            "enable_prefix_caching": self.enable_prefix_caching,
            "kv_cache_dtype": self.kv_cache_dtype,
            "max_model_len": -1 if self.max_model_len is None else self.max_model_len,
        }


def _spec_variants(space: SearchSpace) -> list[tuple[int, tuple[int, ...] | None, str]]:
    out: list[tuple[int, tuple[int, ...] | None, str]] = []
    if 0 in space.ks:
        out.append((0, None, space.commit_modes[0]))
    for tree in space.trees:
        if tree is None:
            out += [(k, None, m) for k in space.ks if k > 0 for m in space.commit_modes]
        else:
            out += [(len(tree), tree, m) for m in space.commit_modes]
    return list(dict.fromkeys(out))


def expand_space(model: str, space: SearchSpace, max_model_len: int | None) -> list[Candidate]:
    """Every candidate, in a fixed order (GPU, TP, spec, then the engine knobs)."""
    mml = space.max_model_len if space.max_model_len is not None else max_model_len
    out = [
        Candidate(
            model=model,
            gpu=g,
            tp=tp,
            gmu=gmu,
            max_num_seqs=seqs,
            max_num_batched_tokens=mnbt,
            num_spec_tok=k,
            tree=tree,
            commit=mode,
            enable_prefix_caching=pc,
            kv_cache_dtype=kv,
            max_model_len=mml,
            step_time=space.step_time,
            pool=space.pool,
        )
        for g in space.gpus
        for tp in space.tps
        for k, tree, mode in _spec_variants(space)
        for gmu in space.gmus
        for seqs in space.max_num_seqs
        for mnbt in space.max_num_batched_tokens
        for pc in space.prefix_caching
        for kv in space.kv_cache_dtypes
    ]
    if not out:
        raise ValueError("space: the search space is empty (no GPU x TP x spec combination)")
    return out


def default_max_model_len(prompt_tok: object, output_tok: object) -> int:
    """The smallest power of two (>= 4096) holding the sample's longest request."""
    import numpy as np

    longest = int(np.max(np.asarray(prompt_tok) + np.asarray(output_tok)))
    return max(4096, 2 ** math.ceil(math.log2(max(longest, 1))))
