"""A day-long rate profile: 24 hourly rates as fractions of the peak hour.

``data/diurnal_standin_24h.csv`` is a STAND-IN, not measured data: no day-long LLM trace
is shipped (the Azure 2023 traces cover one hour each; BurstGPT is not obtainable here,
``shared/traces/README.md``). Its shape is one cosine per day, ``(1 + 0.5 cos(2 pi (h -
15) / 24)) / 1.5``: peak at 15:00, trough at 03:00, peak/trough = 3 (an assumption, chosen
to resemble the daily swing BurstGPT's paper plots; replace it with a measured profile via
``load_profile(path)``: a CSV with columns ``hour,rate_frac`` or ``hour,rate_req_per_s``).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

STANDIN = Path(__file__).resolve().parent / "data" / "diurnal_standin_24h.csv"


def load_profile(
    path: Path | str | None = None, *, peak_req_per_s: float | None = None
) -> np.ndarray:
    """Hourly rates (req/s). ``rate_frac`` columns need ``peak_req_per_s``."""
    p = Path(path) if path is not None else STANDIN
    try:
        rows = list(csv.DictReader(p.read_text().splitlines()))
    except OSError as exc:
        raise ValueError(f"day.profile={str(p)!r}: cannot read ({exc.strerror})") from None
    if not rows or "hour" not in rows[0]:
        raise ValueError(f"day.profile={str(p)!r}: needs a header hour,rate_frac|rate_req_per_s")
    rows.sort(key=lambda r: int(r["hour"]))
    if "rate_req_per_s" in rows[0]:
        rates = np.array([float(r["rate_req_per_s"]) for r in rows])
    elif "rate_frac" in rows[0]:
        if peak_req_per_s is None or not peak_req_per_s > 0:
            raise ValueError(f"day.peak_req_per_s={peak_req_per_s!r}: needed for rate_frac rows")
        rates = np.array([float(r["rate_frac"]) for r in rows]) * float(peak_req_per_s)
    else:
        raise ValueError(f"day.profile={str(p)!r}: needs rate_frac or rate_req_per_s")
    if not np.all(np.isfinite(rates)) or np.any(rates < 0):
        raise ValueError(f"day.profile={str(p)!r}: rates must be finite and >= 0")
    return rates
