"""Build tiny random-weight models and a local tokenizer for the live vLLM cross-check.

Run with the live venv's python (``experiments/live/setup_env.sh`` prints it)::

    .venv-live/bin/python experiments/live/build_tiny_models.py --out .live/models

Nothing is downloaded: the tokenizer is a byte-level BPE trained here on synthetic text and
padded with added tokens to exactly ``VOCAB`` ids, so every id the model can sample decodes.
Two models are written, both in bf16 with fixed seeds:

- ``llama``: Llama-style attention model (hidden 256, 4 layers, 4 heads, 2 KV heads,
  head_dim 64), about 2.5 M parameters;
- ``qwen3next``: Qwen3-Next-style hybrid, 3 Gated DeltaNet layers + 1 full-attention layer,
  4 experts (top-2), linear key/value head dims 128. vLLM 0.32's CPU GDN kernel
  (``chunk_gated_delta_rule_cpu``) rejects other head dims ("Unexpected head dim size, 32";
  shared/LIVE_VLLM.md s7).
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

VOCAB = 512
MAX_POS = 4096


def build_tokenizer(out_dir: Path, seed: int = 0) -> None:
    """Train a byte-level BPE on synthetic words and pad it to VOCAB ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(400)]
    corpus = [" ".join(rng.choice(words) for _ in range(20)) for _ in range(2000)]
    special = ["<s>", "</s>", "<pad>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - 16,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    have = tok.get_vocab_size()
    if have > VOCAB:
        raise ValueError(f"tokenizer vocab_size={have}: exceeds VOCAB={VOCAB}")
    tok.add_tokens([f"<extra_{i}>" for i in range(VOCAB - have)])
    if tok.get_vocab_size() != VOCAB:
        raise ValueError(f"tokenizer vocab_size={tok.get_vocab_size()}: expected {VOCAB}")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    fast.save_pretrained(out_dir)


def _ids(out_dir: Path) -> dict[str, int]:
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(out_dir)
    return {
        "bos_token_id": t.bos_token_id,
        "eos_token_id": t.eos_token_id,
        "pad_token_id": t.pad_token_id,
    }


def build_llama(out_dir: Path, seed: int = 0) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    build_tokenizer(out_dir, seed)
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=MAX_POS,
        torch_dtype="bfloat16",
        tie_word_embeddings=False,
        **_ids(out_dir),
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out_dir)


def build_qwen3next(out_dir: Path, seed: int = 0) -> None:
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    build_tokenizer(out_dir, seed)
    torch.manual_seed(seed)
    cfg = Qwen3NextConfig(
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        # layer i is full attention when (i + 1) % interval == 0: 3 GDN + 1 attention
        full_attention_interval=4,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=128,
        shared_expert_intermediate_size=128,
        decoder_sparse_step=1,
        max_position_embeddings=MAX_POS,
        torch_dtype="bfloat16",
        tie_word_embeddings=False,
        **_ids(out_dir),
    )
    model = Qwen3NextForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out_dir)


def build_qwen3next_mtp(out_dir: Path, seed: int = 0) -> None:
    """``qwen3next`` plus one MTP layer (``mtp.*`` tensors, ``num_nextn_predict_layers=1``)
    for ``speculative_config={"method": "mtp"}``. The names are those vLLM's
    ``qwen3_next_mtp.py`` loads (``mtp.`` -> ``model.``): fc [H, 2H], three RMSNorms and one
    full-attention decoder layer, here a copy of target layer 3 (the attention layer)."""
    import torch
    from safetensors.torch import load_file, save_file

    build_qwen3next(out_dir, seed)
    cfg_path = out_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["num_nextn_predict_layers"] = 1
    cfg_path.write_text(json.dumps(cfg, indent=2))
    weights = load_file(out_dir / "model.safetensors")
    hidden = int(cfg["hidden_size"])
    gen = torch.Generator().manual_seed(seed + 1)
    attn_layer = int(cfg.get("full_attention_interval", 4)) - 1
    src = f"model.layers.{attn_layer}."
    for name, t in list(weights.items()):
        if name.startswith(src):
            weights["mtp.layers.0." + name[len(src) :]] = t.clone()
    weights["mtp.fc.weight"] = (torch.randn(hidden, 2 * hidden, generator=gen) * 0.02).to(
        torch.bfloat16
    )
    for norm in ("norm", "pre_fc_norm_hidden", "pre_fc_norm_embedding"):
        weights[f"mtp.{norm}.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    save_file(weights, out_dir / "model.safetensors", metadata={"format": "pt"})


BUILDERS = {
    "llama": build_llama,
    "qwen3next": build_qwen3next,
    "qwen3next_mtp": build_qwen3next_mtp,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", default=".live/models", help="folder that gets one subfolder per model"
    )
    ap.add_argument(
        "--models",
        default="llama,qwen3next,qwen3next_mtp",
        help="comma list of " + ",".join(BUILDERS),
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = Path(args.out)
    for name in args.models.split(","):
        if name not in BUILDERS:
            raise ValueError(f"--models={name!r}: must be one of {sorted(BUILDERS)}")
        dest = root / name
        stamp = dest / "capsim_tiny.json"
        if stamp.exists():
            print(f"{name}: exists at {dest}")
            continue
        tmp = root / f".{name}.tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        BUILDERS[name](tmp, args.seed)
        (tmp / "capsim_tiny.json").write_text(json.dumps({"name": name, "seed": args.seed}))
        if dest.exists():
            import shutil

            shutil.rmtree(dest)
        tmp.rename(dest)
        print(f"{name}: built at {dest}")


if __name__ == "__main__":
    main()
