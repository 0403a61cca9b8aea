"""The measured grids of the step-operator benchmark (full and CPU smoke), the whole-step
compositions, and the CSV schemas."""

from __future__ import annotations

from capsim.models import ModelSpec

SCHEMA_VERSION = 1
COLUMNS = (
    "op",
    "key",
    "impl",
    "m_tok",
    "n",
    "k",
    "batch",
    "q_tok",
    "ctx_tok",
    "flops",
    "bytes",
    "copies",
    "timing",
    "p20_us",
    "p50_us",
    "p80_us",
)
VAL_COLUMNS = (
    "model",
    "finite",
    "tp",
    "num_decode_req",
    "q_tok",
    "ctx_tok",
    "prefill_tok",
    "prefill_chunks",
    "tree",
    "depth",
    "commit",
    "kind",
    "timing",
    "p20_us",
    "p50_us",
    "p80_us",
)

FULL_GRID = {
    "m": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
    "m_logits": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
    "batch": [1, 4, 16, 64, 256, 1024],
    "ctx": [256, 1024, 4096, 16384, 65536],
    "q": [1, 4, 16, 40],
    "max_kv_tok": 16 * 2**20,
    "pre_n": [64, 256, 1024, 4096, 16384],
    "pre_ctx": [0, 2048, 8192, 32768],
    "gdn_t": [64, 256, 1024, 4096, 16384],
    "host_m": [1, 64, 1024, 4096],
    "val": [
        (1, 4, 2048, 0),
        (8, 4, 2048, 0),
        (64, 4, 2048, 0),
        (256, 4, 2048, 0),
        (64, 4, 8192, 0),
        (32, 4, 2048, 2048),
        (0, 4, 0, 4096),
    ],
}
VLLM_VAL = (  # whole steps of the 35B: compositions no operator series was measured at
    # (R, ctx, tree, prefill chunks (new, cached))
    (2, 3000, None, ()),
    (12, 1500, None, ()),
    (48, 6000, None, ()),
    (100, 2500, None, ()),
    (200, 1200, None, ()),
    (384, 700, None, ()),
    (24, 3000, None, ((1500, 0),)),
    (8, 5000, None, ((3000, 2000),)),
    (96, 1000, None, ((512, 4096), (256, 0))),
    (0, 0, None, ((3000, 1000),)),
    (8, 2000, (2, 2, 2), ()),
    (40, 3000, (2, 2, 2), ()),
    (16, 2500, (2, 2, 1), ()),
    (64, 1800, (2, 2, 1), ()),
)
VLLM_GDN_GRID = {"T": (4, 15, 40), "B": (1, 8, 32, 128, 256)}
MOE_STANDIN_M = (1, 16, 256, 4096)
GDN_COLUMNS = (
    "kernel", "model_shape", "state_dtype", "T", "tree", "B", "Hv", "Hk", "dk", "dv",
    "p20_us", "p50_us", "p80_us", "bytes_moved", "impl", "source",
)  # fmt: skip

SMOKE_GRID = {
    "m": [1, 4, 16],
    "m_logits": [1, 4, 16],
    "batch": [1, 4],
    "ctx": [16, 64],
    "q": [1, 4],
    "max_kv_tok": 4096,
    "pre_n": [8, 32],
    "pre_ctx": [0, 16],
    "gdn_t": [4, 8],
    "host_m": [1, 4],
    "val": [(2, 4, 32, 0), (1, 4, 16, 16)],
}

SMOKE_MODEL = ModelSpec(
    name="smoke-tiny",
    hidden_size=64,
    num_gdn_layers=3,
    num_attn_layers=1,
    num_attention_heads=4,
    num_kv_heads=2,
    head_dim=16,
    attn_output_gate=True,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=32,
    vocab_size=512,
    sources=("synthetic: CPU smoke test only",),
)

DEFAULT_MODELS = ("qwen3.5-35b-a3b:1", "qwen3.5-397b-a17b:8", "qwen3-next-80b-a3b:1")
