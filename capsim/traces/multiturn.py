"""Multi-turn ShareGPT conversations, replayed turn by turn, with token-block identity.

Derivation (``derive_multiturn``, run by ``scripts/derive_traces/derive_multiturn.py``): the
raw ShareGPT file's conversations are walked in file order; a conversation contributes its
leading run of alternating ``human``/``gpt`` messages, cut into (user, assistant) turns;
entries with fewer than 2 such turns are skipped. Per turn it stores the token counts,
Qwen3 and Qwen3.5 tokenizers:

- ``*_user_tok``: the user message in the chat template with the generation prompt
  (``tokenize.templated``, 8 template tokens for Qwen3);
- ``*_asst_tok``: the assistant message (the turn's output length);

and ``END_TOK`` = 2 tokens (``<|im_end|>\\n``) close an assistant message in later prompts.

Replay (``multiturn_table``): turn ``t``'s prompt is the whole history
``U1 A1 E U2 A2 E ... Ut`` and its output is ``At``; the assistant messages in the history
are taken to be what the model generated (a live chat: the served answer comes back in the
next prompt), so the history is a cached prefix. Each request names its content as
segments (``capsim.core.block_hash``) and its previous turn as ``parent``: the load
generator sends turn ``t+1`` only after turn ``t`` finished. Conversations are cut at the
first turn whose prompt + output exceeds ``max_context_tok``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from capsim.traces.compact import read_compact
from capsim.traces.table import RequestTable
from capsim.traces.textio import read_text
from capsim.traces.tokenize import TokenCounter, templated

STEM = "sharegpt_multiturn"
END_TOK = 2
"""``<|im_end|>\\n`` after an assistant message in the history (Qwen chat template)."""

# segment ids: conversation << 16 | turn << 2 | kind
_USER, _ASST, _END = 0, 1, 2


def conversation_turns(
    path: Path | str, max_conversations: int
) -> list[tuple[int, list[tuple[str, str]]]]:
    """``(entry_index, [(user, assistant), ...])`` for the first conversations with >= 2
    alternating human/gpt turns."""
    entries = json.loads(read_text(path))
    out: list[tuple[int, list[tuple[str, str]]]] = []
    for index, entry in enumerate(entries):
        conv = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(conv, list):
            continue
        turns: list[tuple[str, str]] = []
        for j in range(0, len(conv) - 1, 2):
            u, a = conv[j], conv[j + 1]
            if not (isinstance(u, dict) and isinstance(a, dict)):
                break
            if u.get("from") != "human" or a.get("from") != "gpt":
                break
            if not isinstance(u.get("value"), str) or not isinstance(a.get("value"), str):
                break
            turns.append((u["value"], a["value"]))
        if len(turns) >= 2:
            out.append((index, turns))
            if len(out) >= max_conversations:
                break
    return out


def derive_multiturn(
    raw: Path | str, qwen3: TokenCounter, qwen35: TokenCounter, max_conversations: int
) -> pd.DataFrame:
    """One row per turn: ``entry_index, turn, qwen3_user_tok, qwen3_asst_tok,
    qwen35_user_tok, qwen35_asst_tok`` (int32)."""
    rows: list[tuple[int, ...]] = []
    for index, turns in conversation_turns(raw, max_conversations):
        for t, (u, a) in enumerate(turns):
            rows.append(
                (
                    index,
                    t,
                    qwen3(templated(u)),
                    max(qwen3(a), 1),
                    qwen35(templated(u)),
                    max(qwen35(a), 1),
                )
            )
    cols = [
        "entry_index",
        "turn",
        "qwen3_user_tok",
        "qwen3_asst_tok",
        "qwen35_user_tok",
        "qwen35_asst_tok",
    ]
    frame = pd.DataFrame(rows, columns=cols)
    return frame.astype(dict.fromkeys(cols, "int32"))


def _seg(conv: int, turn: int, kind: int) -> int:
    return (conv << 16) | (turn << 2) | kind


def multiturn_table(
    frame: pd.DataFrame,
    *,
    family: str,
    num_requests: int,
    seed: int,
    max_context_tok: int = 16384,
    name: str = "sharegpt-multiturn",
) -> RequestTable:
    """Whole conversations in a seeded order until ``num_requests`` turns are taken
    (the last conversation may be cut short)."""
    user = frame[f"{family}_user_tok"].to_numpy(np.int64)
    asst = frame[f"{family}_asst_tok"].to_numpy(np.int64)
    entry = frame["entry_index"].to_numpy(np.int64)
    starts = np.flatnonzero(np.r_[True, entry[1:] != entry[:-1]])
    ends = np.r_[starts[1:], entry.size]
    order = np.random.default_rng(seed).permutation(starts.size)
    prompt: list[int] = []
    output: list[int] = []
    parent: list[int] = []
    segments: list[tuple[tuple[int, int], ...]] = []
    source: list[str] = []
    rounds = 0
    while len(prompt) < num_requests:
        before = len(prompt)
        for c in order:
            conv = int(c) + rounds * starts.size  # a replayed copy is new content
            history: list[tuple[int, int]] = []
            prev = -1
            for t, row in enumerate(range(starts[c], ends[c])):
                u, a = int(user[row]), int(asst[row])
                p = sum(n for _, n in history) + u
                if p + a > max_context_tok or len(prompt) >= num_requests:
                    break
                segs = (*history, (_seg(conv, t, _USER), u))
                segments.append((*segs, (_seg(conv, t, _ASST), a)))
                prompt.append(p)
                output.append(a)
                parent.append(prev)
                source.append(f"sharegpt:entry{int(entry[row])}:turn{t}")
                prev = len(prompt) - 1
                history = [*segs, (_seg(conv, t, _ASST), a), (_seg(conv, t, _END), END_TOK)]
            if len(prompt) >= num_requests:
                break
        if len(prompt) == before:
            raise ValueError(f"{name}: no conversation fits max_context_tok={max_context_tok}")
        rounds += 1
    return RequestTable(
        name=name,
        prompt_tok=np.asarray(prompt, dtype=np.int64),
        output_tok=np.asarray(output, dtype=np.int64),
        source_id=tuple(source),
        segments=tuple(segments),
        parent=np.asarray(parent, dtype=np.int64),
    )


def load_multiturn(
    num_requests: int, seed: int, family: str, root: Path | None = None
) -> RequestTable:
    return multiturn_table(
        read_compact(STEM, root), family=family, num_requests=num_requests, seed=seed
    )
