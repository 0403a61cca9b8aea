"""Session 14's pre-registration: capsim's per-mode CUDA-graph samples for the emulated 397B
TP8 rank, the numbers vLLM 0.26's DEBUG lines "Estimated {PIECEWISE,FULL} CUDA graph memory:
X MiB first-capture + (n-1) x Y MiB per-graph" are compared with. The terms
``capsim.memory.terms.cudagraph_term`` builds, printed per mode (capsim memory prints the total).

  PYTHONPATH=. python3 experiments/memory_plan/h200/prereg_s14_samples.py
"""

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.memory import cudagraph as cg
from capsim.memory import terms
from capsim.memory.activation import captured_forward_bytes
from capsim.memory.memory_plan import plan_inputs
from capsim.models import get_model

MiB = 2**20
CONFIG = "experiments/memory_plan/h200/qwen3.5-397b-tp8shape.config.json"


def main() -> None:
    m = get_model(CONFIG)
    engine = EngineConfig(tp=1, gmu=0.9, vllm_version="0.26", enable_prefix_caching=False)
    p = plan_inputs(m, get_gpu("h200"), engine, SpecDecodeConfig(num_spec_tok=3))
    descs = terms.capture_descs_for(p)
    k = p.spec.num_draft_nodes
    transient = cg.gdn_transient_bytes(m.conv_dim, k)
    split_at = lambda n: cg.fa_split_buffer_bytes(n, m.num_attention_heads, m.head_dim)  # noqa: E731
    samples = cg.modelled_samples(
        descs,
        lambda n: captured_forward_bytes(m, 1, n),
        attn_layers=m.num_attn_layers + (m.num_mtp_layers if p.spec.uses_mtp else 0),
        fa_split_at=split_at,
        transient_bytes=transient,
        transient_source="",
    )
    for mode, s in samples.items():
        first, per = s.first_bytes / MiB, s.second_bytes / MiB
        print(f"{mode}: {descs.count(mode)} graphs, first {first:.2f} MiB, per graph {per:.2f} MiB")
    k0, drafter = (
        cg.gdn_transient_k0_bytes(m.conv_dim),
        cg.gdn_transient_drafter_bytes(m.conv_dim, k),
    )
    print(
        f"FA split buffers at {descs.full_tok[0]} tok: {split_at(descs.full_tok[0]) / MiB:.2f} MiB"
    )
    print(
        f"GDN transient {transient / MiB:.2f} MiB = k=0 part {k0 / MiB:.2f} + drafter part "
        f"{drafter / MiB:.2f} (conv_dim {m.conv_dim}, fitted at {cg.GDN_TRANSIENT_FIT_CONV_DIM})"
    )
    print(f"estimate {cg.estimate_bytes(descs, samples) / MiB:.2f} MiB")


if __name__ == "__main__":
    main()
