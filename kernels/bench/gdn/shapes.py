"""The measured grid (SPEC.md 3.1) and the bytes each kernel must move.

Per-GPU GDN layer shapes are derived from capsim's presets (``capsim.models.PRESETS``
through ``capsim.calibration.shapes.step_shapes``, the sharding rule the step model
prices), never copied: e.g. Qwen3.5-35B-A3B at TP1 has 32 value and 16 key heads,
Qwen3.5-397B-A17B at TP8 8 and 2; d_k = d_v = 128.
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim.calibration.shapes import step_shapes
from capsim.models import PRESETS

from ...gdn_verify.tree import TreeSpec

__all__ = [
    "BATCHES",
    "KERNELS",
    "MODEL_SHAPES",
    "STATE_DTYPES",
    "WINDOWS",
    "ModelShape",
    "bytes_moved",
    "gdn_shape",
    "tp_shapes",
]


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    num_v_heads: int
    num_k_heads: int
    dk: int
    dv: int

    @property
    def heads_key(self) -> tuple[int, int, int, int]:
        return (self.num_v_heads, self.num_k_heads, self.dk, self.dv)


def gdn_shape(model: str, tp: int) -> ModelShape:
    """Per-GPU GDN heads of preset ``model`` at tensor-parallel size ``tp``."""
    if model not in PRESETS:
        raise ValueError(f"model={model!r} is not a capsim preset ({sorted(PRESETS)})")
    s = step_shapes(PRESETS[model], tp)
    return ModelShape(f"{model}-tp{tp}", s.gdn_hv, s.gdn_hk, s.gdn_dk, s.gdn_dv)


def tp_shapes(tps: tuple[int, ...] = (1, 2, 4, 8)) -> tuple[ModelShape, ...]:
    """One shape per distinct per-GPU head count over every preset and ``tps`` (the first
    (model, tp) that has it names it)."""
    seen: dict[tuple[int, int, int, int], ModelShape] = {}
    for name in PRESETS:
        for tp in tps:
            shp = gdn_shape(name, tp)
            seen.setdefault(shp.heads_key, shp)
    return tuple(seen.values())


MODEL_SHAPES = (gdn_shape("qwen3.5-35b-a3b", 1), gdn_shape("qwen3.5-397b-a17b", 8))
STATE_DTYPES = ("float32", "bfloat16")
BATCHES = (1, 32, 128, 256)
# T in {4, 15, 40}: the chain of that length and the SPEC trees with W = 15 and 40
WINDOWS = (
    TreeSpec.chain(4),
    TreeSpec.chain(15),
    TreeSpec((2, 2, 2)),
    TreeSpec.chain(40),
    TreeSpec((3, 3, 3)),
)
KERNELS = (
    "storeall",
    "treewy_verify",
    "treewy_commit",
    "treewy_verify_commit",
    "fused_chain",
    "deferred",
    "fla_fused_recurrent",
    "fla_chunk",
)
CHAIN_ONLY = frozenset({"fused_chain", "fla_fused_recurrent", "fla_chunk"})

_STATE_BYTES = {"float32": 4, "bfloat16": 2}


def bytes_moved(
    kernel: str, shape: ModelShape, state_dtype: str, num_nodes: int, batch: int
) -> int:
    """Fewest bytes one layer call must move: each input read once, each output written once.

    q, k, v and o are bf16; gates, betas and pseudo-values fp32; slot indices ignored.
    fla's kernels always write their final state in fp32.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if state_dtype not in _STATE_BYTES:
        raise ValueError(f"state_dtype must be one of {tuple(_STATE_BYTES)}, got {state_dtype!r}")
    b, w, hv, hk = batch, num_nodes, shape.num_v_heads, shape.num_k_heads
    state_elems = b * hv * shape.dv * shape.dk
    st = state_elems * _STATE_BYTES[state_dtype]
    k_bytes = b * w * hk * shape.dk * 2
    v_bytes = b * w * hv * shape.dv * 2  # v read or o written
    g_bytes = b * w * hv * 4  # log gates or betas
    vt_bytes = b * w * hv * shape.dv * 4
    window_in = 2 * k_bytes + v_bytes + 2 * g_bytes  # q, k, v, gates, betas
    verify = st + window_in + v_bytes + vt_bytes
    commit = 2 * st + k_bytes + vt_bytes + g_bytes
    table = {
        "storeall": (1 + w) * st + window_in + v_bytes,
        "treewy_verify": verify,
        "treewy_commit": commit,
        "treewy_verify_commit": verify + commit,
        "fused_chain": 2 * st + window_in + v_bytes,
        # + previous window's k, vt, gates read; this window's vt, k, gates written
        "deferred": 2 * st + window_in + v_bytes + 2 * (k_bytes + vt_bytes + g_bytes),
        "fla_fused_recurrent": st + state_elems * 4 + window_in + v_bytes,
        "fla_chunk": st + state_elems * 4 + window_in + v_bytes,
    }
    return table[kernel]
