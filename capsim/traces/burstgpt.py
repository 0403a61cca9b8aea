"""BurstGPT CSV loader (6- and 8-column schemas), vLLM's sampler, and a LABELLED length stand-in.

BurstGPT (Wang et al., KDD '25, arXiv 2401.17644; ``HPMLL/BurstGPT``, CC-BY-4.0) logs Azure
OpenAI GPT requests. Schemas (``shared/traces/raw/burstgpt/PROVENANCE.md``):

- 6 columns (``_1``, ``_2`` files): ``Timestamp,Model,Request tokens,Response tokens,
  Total tokens,Log Type``
- 8 columns (``_3`` files): ``Timestamp,Session ID,Elapsed time,Model,Request tokens,
  Response tokens,Total tokens,Log Type``

The rows themselves are NOT available to this project. ``read_burstgpt`` is tested on files
generated in that schema. vLLM's ``BurstGPTDataset`` keeps ``Model == "GPT-4"`` rows with
``Response tokens > 0``, draws ``DataFrame.sample(n, random_state=seed)`` (with replacement when
n exceeds the rows) and ignores timestamps; ``sample_burstgpt`` does the same by column *name*
(vLLM reads columns 2 and 3 by position, which is wrong for the 8-column files).

``burstgpt_standin`` is NOT BurstGPT data: it draws lengths from the synthetic model that the
BurstGPT authors ship in their own generator, BurstGPT-Perf (``HPMLL/BurstGPT``,
``example/src/burstgpt/config.py`` and ``workload.py`` at commit ``01131e1b``): prompt and output
lengths each Zipf(a = 1.1), redrawn until below 1024 (``zipf_param=1.1``,
``max_prompt_len=max_gen_len=1024``). That model is heavy-tailed and far shorter on average than
the GPT-4 rows vLLM samples; it is the only published parameterisation found here.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from capsim.traces.csvrows import parse_float, parse_int, read_csv_rows
from capsim.traces.errors import RowIssue, raise_if_issues
from capsim.traces.sampling import check_count
from capsim.traces.table import RequestTable

BURSTGPT_6_COLUMNS = (
    "Timestamp",
    "Model",
    "Request tokens",
    "Response tokens",
    "Total tokens",
    "Log Type",
)
BURSTGPT_8_COLUMNS = (
    "Timestamp",
    "Session ID",
    "Elapsed time",
    "Model",
    "Request tokens",
    "Response tokens",
    "Total tokens",
    "Log Type",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class BurstgptRows:
    """Typed columns of a BurstGPT CSV, in file order."""

    path: Path
    schema: str  # "6-column" or "8-column"
    timestamp_s: np.ndarray  # float64, seconds from midnight of day 1
    model: tuple[str, ...]
    request_tok: np.ndarray  # int64, >= 0
    response_tok: np.ndarray  # int64, >= 0 (0 = failed request)
    log_type: tuple[str, ...]
    lines: np.ndarray  # int64, 1-based line of each row

    @property
    def num_rows(self) -> int:
        return int(self.request_tok.size)


def read_burstgpt(path: Path | str) -> BurstgptRows:
    """Parse a BurstGPT CSV of either schema; every malformed row is reported."""
    schema, header, rows, issues = read_csv_rows(
        path, {"6-column": BURSTGPT_6_COLUMNS, "8-column": BURSTGPT_8_COLUMNS}
    )
    col = {name: i for i, name in enumerate(header)}
    ts: list[float] = []
    model: list[str] = []
    req: list[int] = []
    resp: list[int] = []
    log: list[str] = []
    lines: list[int] = []
    for line, cells in rows:
        try:
            t = parse_float(cells[col["Timestamp"]], "Timestamp", minimum=0.0)
            m = cells[col["Model"]].strip()
            if not m:
                raise ValueError("Model is empty")
            r_in = parse_int(cells[col["Request tokens"]], "Request tokens", minimum=0)
            r_out = parse_int(cells[col["Response tokens"]], "Response tokens", minimum=0)
            total = parse_int(cells[col["Total tokens"]], "Total tokens", minimum=0)
            if total != r_in + r_out:
                raise ValueError(
                    f"Total tokens={total} is not Request + Response tokens ({r_in + r_out})"
                )
            lt = cells[col["Log Type"]].strip()
            if not lt:
                raise ValueError("Log Type is empty")
            if schema == "8-column" and cells[col["Elapsed time"]].strip():
                parse_float(cells[col["Elapsed time"]], "Elapsed time", minimum=0.0)
        except ValueError as exc:
            issues.append(RowIssue(line, str(exc)))
            continue
        ts.append(t)
        model.append(m)
        req.append(r_in)
        resp.append(r_out)
        log.append(lt)
        lines.append(line)
    issues.sort(key=lambda i: i.line)
    raise_if_issues(path, issues, "BurstGPT")
    return BurstgptRows(
        path=Path(path),
        schema=schema,
        timestamp_s=np.asarray(ts, dtype=np.float64),
        model=tuple(model),
        request_tok=np.asarray(req, dtype=np.int64),
        response_tok=np.asarray(resp, dtype=np.int64),
        log_type=tuple(log),
        lines=np.asarray(lines, dtype=np.int64),
    )


def sample_burstgpt(
    rows: BurstgptRows, *, num_requests: int, seed: int, model: str = "GPT-4"
) -> RequestTable:
    """vLLM's ``BurstGPTDataset`` sample: ``model`` rows with responses, seeded pandas sample.

    Arrivals are None (vLLM ignores the timestamps; the load generator sets the rate). Rows
    with 0 request tokens cannot be simulated (a prompt needs >= 1 token); they are dropped
    with a warning that counts them.
    """
    check_count(num_requests, seed)
    keep = np.array([m == model for m in rows.model], dtype=bool) & (rows.response_tok > 0)
    empty_prompt = keep & (rows.request_tok < 1)
    if empty_prompt.any():
        warnings.warn(
            f"{rows.path}: dropped {int(empty_prompt.sum())} {model} rows with 0 request tokens "
            f"(first at line {int(rows.lines[np.argmax(empty_prompt)])})",
            stacklevel=2,
        )
        keep &= ~empty_prompt
    idx = np.flatnonzero(keep)
    if idx.size == 0:
        raise ValueError(f"{rows.path}: no {model!r} rows with Response tokens > 0")
    frame = pd.DataFrame({"row": idx})
    picked = frame.sample(n=num_requests, random_state=seed, replace=num_requests > idx.size)[
        "row"
    ].to_numpy()
    return RequestTable(
        name="burstgpt",
        prompt_tok=rows.request_tok[picked],
        output_tok=rows.response_tok[picked],
        source_id=tuple(f"burstgpt:line{int(rows.lines[i])}" for i in picked),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class BurstgptStandin:
    """Parameters of the stand-in length model (BurstGPT-Perf defaults; NOT BurstGPT rows)."""

    zipf_a: float = field(default=1.1, metadata={"help": "Zipf exponent of both lengths"})
    max_prompt_tok: int = field(default=1024, metadata={"help": "prompt lengths stay below"})
    max_output_tok: int = field(default=1024, metadata={"help": "output lengths stay below"})

    def __post_init__(self) -> None:
        if not self.zipf_a > 1.0:
            raise ValueError(f"BurstgptStandin: zipf_a={self.zipf_a!r} must be > 1")
        for name in ("max_prompt_tok", "max_output_tok"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 2:
                raise ValueError(f"BurstgptStandin: {name}={value!r} must be an int >= 2")


def _truncated_zipf(rng: np.random.Generator, a: float, limit: int, size: int) -> np.ndarray:
    out = rng.zipf(a, size=size)
    bad = out >= limit
    while bad.any():  # redraw, as BurstGPT-Perf does, until every value is below the limit
        out[bad] = rng.zipf(a, size=int(bad.sum()))
        bad = out >= limit
    return out.astype(np.int64)


def burstgpt_standin(
    *, num_requests: int, seed: int, params: BurstgptStandin | None = None
) -> RequestTable:
    """LABELLED STAND-IN for BurstGPT lengths (see module docstring); arrivals None."""
    check_count(num_requests, seed)
    p = params or BurstgptStandin()
    prompt_ss, output_ss = np.random.SeedSequence(seed).spawn(2)
    prompt = _truncated_zipf(
        np.random.default_rng(prompt_ss), p.zipf_a, p.max_prompt_tok, num_requests
    )
    output = _truncated_zipf(
        np.random.default_rng(output_ss), p.zipf_a, p.max_output_tok, num_requests
    )
    return RequestTable(
        name="burstgpt-standin",
        prompt_tok=prompt,
        output_tok=output,
        source_id=tuple(f"burstgpt-standin(zipf{p.zipf_a}):{i}" for i in range(num_requests)),
    )
