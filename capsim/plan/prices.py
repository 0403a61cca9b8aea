"""GPU prices: a shipped, cited table of list prices per GPU-hour, overridable by the user.

``data/gpu_prices.csv`` has one row per GPU (registry name), its price in USD per GPU-hour,
``kind`` (``list``: a public on-demand list price, not a negotiated or reserved rate), the
source URL, the date it was read and a note saying how the number was derived. A user file
with the same columns (``--prices FILE``) replaces rows by GPU name; only ``gpu`` and
``usd_per_gpu_hour`` are required there.

Price arithmetic (one place)::

    fleet $/h   = replicas x tp x usd_per_gpu_hour
    $/Mtok      = fleet $/h / (output tok/s x 3600 / 1e6)   (output tokens, like vLLM bench)
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from capsim.gpus import get_gpu

DEFAULT_PRICES = Path(__file__).resolve().parent / "data" / "gpu_prices.csv"


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuPrice:
    gpu: str
    usd_per_gpu_hour: float
    kind: str = "user"
    source_url: str = ""
    retrieved: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        v = self.usd_per_gpu_hour
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"prices.usd_per_gpu_hour={v!r} for gpu={self.gpu!r}: must be > 0")


def _read(path: Path, kind_default: str) -> dict[str, GpuPrice]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"prices={str(path)!r}: cannot read ({exc.strerror})") from None
    rows = list(csv.DictReader(text.splitlines()))
    if not rows or "gpu" not in rows[0] or "usd_per_gpu_hour" not in rows[0]:
        raise ValueError(f"prices={str(path)!r}: needs columns gpu,usd_per_gpu_hour")
    out: dict[str, GpuPrice] = {}
    for i, r in enumerate(rows, start=2):
        name = get_gpu(str(r["gpu"]).strip()).name  # unknown GPU -> one-line error
        try:
            usd = float(r["usd_per_gpu_hour"])
        except (TypeError, ValueError):
            raise ValueError(
                f"prices={str(path)!r} line {i}: usd_per_gpu_hour={r['usd_per_gpu_hour']!r} "
                "is not a number"
            ) from None
        out[name] = GpuPrice(
            gpu=name,
            usd_per_gpu_hour=usd,
            kind=(r.get("kind") or kind_default).strip(),
            source_url=(r.get("source_url") or "").strip(),
            retrieved=(r.get("retrieved") or "").strip(),
            note=(r.get("note") or "").strip(),
        )
    return out


def load_prices(override: Path | str | None = None) -> dict[str, GpuPrice]:
    """The shipped table, with the rows of ``override`` (a CSV) replacing them by GPU."""
    prices = _read(DEFAULT_PRICES, "list")
    if override is not None:
        prices |= _read(Path(override), "user")
    return prices


def price_for(prices: dict[str, GpuPrice], gpu: str) -> GpuPrice:
    name = get_gpu(gpu).name
    if name not in prices:
        raise ValueError(
            f"gpu={gpu!r}: no price in the table (have {sorted(prices)}); add a row "
            "gpu,usd_per_gpu_hour to a --prices file"
        )
    return prices[name]


def fleet_usd_per_hour(replicas: int, tp: int, usd_per_gpu_hour: float) -> float:
    return float(replicas * tp * usd_per_gpu_hour)


def usd_per_mtok(fleet_usd_per_h: float, output_tok_per_s: float) -> float:
    """Dollars per million output tokens at a fleet throughput (inf when it emits nothing)."""
    if not output_tok_per_s > 0:
        return math.inf
    return fleet_usd_per_h / (output_tok_per_s * 3600.0 / 1e6)
