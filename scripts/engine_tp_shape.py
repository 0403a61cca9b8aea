"""Write the config.json of one TP rank's shapes (capsim.live.tp_shape) for the real engine.

The base is the 35B model dir's config.json (scripts/engine_model_dir.py from
experiments/vllm_logs/models/qwen3.5-35b-a3b.json: rope block, token ids, vision tower), the
shapes are the preset's as one rank of --tp holds them. A job's ``server.model_config`` names
the written file; engine_runner.py serves it from a sibling of the payload's model dir.

  python3 scripts/engine_tp_shape.py --preset qwen3.5-397b-a17b --tp 8 \
      --out experiments/memory_plan/h200/qwen3.5-397b-tp8shape.config.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import engine_model_dir

from capsim.live.tp_shape import tp_shape_config
from capsim.models import PRESETS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--base", default="experiments/vllm_logs/models/qwen3.5-35b-a3b.json")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    base = engine_model_dir.model_config(json.loads(Path(a.base).read_text()))
    try:
        cfg = tp_shape_config(base, PRESETS[a.preset], a.tp)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(a.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
