"""Which draft candidate the target picks: the rank model of draft trees, and temperature.

**Rank model.** At depth d the token the target emits is the draft's rank-r candidate with
probability ``pi_d(r)``; a depth of width ``w`` is accepted with
``q_d(w) = sum_{r <= w} pi_d(r) = 1 - miss_d(w)``. ``pi_d(1)`` is the chain's conditional
acceptance ``p_d`` (per workload), and the miss probability falls with the width as a
power law::

    miss_d(w) = (1 - p_d) * w ** -beta(p_d),   beta(p) = BETA_SLOPE * p + BETA_INTERCEPT

(never above the independence bound below, which only binds at p_d < 0.03).

**Data** (``MEDUSA_TOPK``): the top-1..top-5 accuracy of each of the 5 Medusa-1 heads on
Vicuna-7B/13B/33B v1.3, published by the Medusa authors in
github.com/FasterDecoding/Medusa ``assets/medusa_acc.csv`` (W&B export of their training
runs, Aug 2023; head i predicts the token i+2 ahead). Per head, the power law fits the five
accuracies within 0.014 absolute; ``beta`` grows with the head's top-1 accuracy, and the
line below fits the 15 heads within 0.018 (``fit_beta_line`` recomputes it; a test checks
the constants against it). Top-1 accuracies in the data span 0.12-0.60; MTP heads run at
0.85 (capsim's default), so ``beta`` there is an extrapolation of the line (0.65).

**Out-of-sample check** (not fitted): EAGLE-1 on LLaMA2-Chat 7B, MT-bench, greedy, reports
an average acceptance length of 3.00 with a depth-5 chain and 3.62 with its 25-node static
tree ``mc_sim_7b_63`` (EAGLE paper arXiv 2401.15077, ablation on tree vs chain drafts; the
numbers are quoted in github.com/SafeAILab/EAGLE issue #132; the tree is
``eagle/model/choices.py``). A constant ``p`` that gives the chain's 3.00 is 0.709; the rank
model then predicts 3.63 for the tree, the independence bound 4.29
(``tests/test_draft_rank.py`` recomputes both).

**Independence bound** (``tree_model = "independent"``): each of the w candidates matches
independently with ``p_d``, i.e. ``pi_d(r) = p_d (1 - p_d)**(r-1)`` and
``q_d = 1 - (1 - p_d)**w``. Real top-w drafts are correlated (when the top-1 misses, the
2nd is right far less often than p_d), so this is an upper bound.

**Temperature.** With sampling, vLLM's rejection sampler accepts an argmax draft token x
with probability ``p_target(x)`` (speculative sampling with a one-hot draft distribution,
Leviathan et al. 2023, arXiv 2211.17192, Sec. 2.3), which is below the greedy match rate.
capsim scales every depth's acceptance by ``1 - TEMPERATURE_SLOPE * T`` (clamped at 0), a
linear model through one public measurement of Qwen3.5 MTP: github.com/raullenchai/
Rapid-MLX issue #3115 (Qwen3.5-4B 4-bit, MTP k=2, M3 Ultra): per-draft acceptance 74/159 =
0.465 at T=0 and 570/1482 = 0.385 at T=0.7 (191/553, 335/829 and 44/100 pooled, two
builds). With a constant per-depth p and k=2, rate = (p + p^2)/2: p = 0.587 at T=0; the
factor f with (f p + f^2 p^2)/2 = 0.385 is 0.869, so the slope is (1 - 0.869)/0.7 = 0.188
per unit T (``temperature_slope_from_measurement`` recomputes it). Caveats: a small sample,
one prompt, thinking on at T=0.7 and off at T=0; T > 0.7 is extrapolated linearly.
"""

from __future__ import annotations

import math

import numpy as np

TREE_MODELS: tuple[str, ...] = ("rank", "independent")
"""``rank``: calibrated rank model (default); ``independent``: the upper bound."""

# Medusa-1 heads' top-1..top-5 accuracy (FasterDecoding/Medusa assets/medusa_acc.csv,
# columns train/medusa{h}_top{k}), rows: (model, head) -> top1..top5.
MEDUSA_TOPK: dict[tuple[str, int], tuple[float, ...]] = {
    ("vicuna-33b", 0): (0.60459, 0.71619, 0.76488, 0.79829, 0.82229),
    ("vicuna-33b", 1): (0.35578, 0.46899, 0.52870, 0.56922, 0.59605),
    ("vicuna-33b", 2): (0.22463, 0.31971, 0.37853, 0.42101, 0.44624),
    ("vicuna-33b", 3): (0.15959, 0.24880, 0.30727, 0.34797, 0.37551),
    ("vicuna-33b", 4): (0.13702, 0.20668, 0.26213, 0.29838, 0.32575),
    ("vicuna-13b", 0): (0.59394, 0.70527, 0.75783, 0.79250, 0.81610),
    ("vicuna-13b", 1): (0.33971, 0.43999, 0.50683, 0.54647, 0.58027),
    ("vicuna-13b", 2): (0.21608, 0.30852, 0.36121, 0.40296, 0.43638),
    ("vicuna-13b", 3): (0.14998, 0.23173, 0.28777, 0.32343, 0.35413),
    ("vicuna-13b", 4): (0.12227, 0.19570, 0.24341, 0.27908, 0.30703),
    ("vicuna-7b", 0): (0.56039, 0.67172, 0.72714, 0.75994, 0.77995),
    ("vicuna-7b", 1): (0.31635, 0.42358, 0.48509, 0.52821, 0.56250),
    ("vicuna-7b", 2): (0.20104, 0.28790, 0.34754, 0.38345, 0.41687),
    ("vicuna-7b", 3): (0.14737, 0.22502, 0.27373, 0.31088, 0.33971),
    ("vicuna-7b", 4): (0.11754, 0.18663, 0.23459, 0.27212, 0.29983),
}

BETA_SLOPE = 0.7004
"""d beta / d p1, least squares over MEDUSA_TOPK (``fit_beta_line``)."""
BETA_INTERCEPT = 0.0516
"""beta at p1 = 0, same fit."""

TEMPERATURE_SLOPE = 0.188
"""Relative acceptance lost per unit temperature (Rapid-MLX issue #3115, see above)."""
MAX_TEMPERATURE = 2.0


def head_beta(topk: tuple[float, ...] | np.ndarray) -> float:
    """Least-squares power-law exponent of one head: log(miss_k / miss_1) = -beta log k."""
    acc = np.asarray(topk, dtype=np.float64)
    miss = 1.0 - acc
    x = np.log(np.arange(2, acc.size + 1, dtype=np.float64))
    y = np.log(miss[1:] / miss[0])
    return float(-(x @ y) / (x @ x))


def fit_beta_line(
    data: dict[tuple[str, int], tuple[float, ...]] = MEDUSA_TOPK,
) -> tuple[float, float]:
    """(slope, intercept) of beta against the head's top-1 accuracy, least squares."""
    p1 = np.array([v[0] for v in data.values()])
    beta = np.array([head_beta(v) for v in data.values()])
    a = np.vstack([p1, np.ones_like(p1)]).T
    slope, intercept = np.linalg.lstsq(a, beta, rcond=None)[0]
    return float(slope), float(intercept)


def rank_beta(p1: float) -> float:
    """Power-law exponent of the miss probability for a top-1 acceptance ``p1``."""
    return BETA_SLOPE * p1 + BETA_INTERCEPT


def width_acceptance(p1: float, width: int, tree_model: str = "rank") -> float:
    """q(w): probability that the target's token is among the draft's top ``width``."""
    if tree_model not in TREE_MODELS:
        raise ValueError(f"acceptance.tree_model={tree_model!r}: must be one of {TREE_MODELS}")
    if width < 1:
        raise ValueError(f"tree width={width!r}: must be >= 1")
    bound = 1.0 - (1.0 - p1) ** width
    if tree_model == "independent":
        return bound
    # The line's intercept (beta(0) = 0.05) would give a width-w tree some acceptance even
    # at p1 = 0; below p1 ~ 0.03 the bound is the smaller, so take it there.
    return min(bound, 1.0 - (1.0 - p1) * width ** -rank_beta(p1))


def rank_probabilities(p1: float, max_rank: int, tree_model: str = "rank") -> np.ndarray:
    """pi(r) for r = 1..max_rank (shape [max_rank])."""
    q = np.array([width_acceptance(p1, w, tree_model) for w in range(1, max_rank + 1)])
    return np.diff(np.concatenate([[0.0], q]))


def expected_accepted_for_choices(
    choices: list[tuple[int, ...]] | list[list[int]], p_by_depth: list[float], tree_model: str
) -> float:
    """Mean accepted drafts of a static tree given as vLLM/EAGLE/Medusa ``choices``
    (each node = the 0-based candidate rank at every depth of its path): the sum over
    nodes of prod_j pi_j(rank_j + 1)."""
    max_rank = 1 + max(r for node in choices for r in node)
    pis = [
        rank_probabilities(p_by_depth[min(d, len(p_by_depth) - 1)], max_rank, tree_model)
        for d in range(max(len(n) for n in choices))
    ]
    return float(sum(math.prod(pis[d][r] for d, r in enumerate(node)) for node in choices))


def temperature_slope_from_measurement(
    rate_t0: float = 74 / 159, rate_t: float = 570 / 1482, temperature: float = 0.7
) -> float:
    """TEMPERATURE_SLOPE from two per-draft acceptance rates of a k=2 chain (see above)."""
    # rate = (x + x^2) / 2 with x = the per-depth acceptance -> x = (sqrt(1 + 8 rate) - 1) / 2
    p0 = (math.sqrt(1.0 + 8.0 * rate_t0) - 1.0) / 2.0
    pt = (math.sqrt(1.0 + 8.0 * rate_t) - 1.0) / 2.0
    return (1.0 - pt / p0) / temperature


def temperature_factor(temperature: float) -> float:
    """Multiplier on every depth's acceptance at sampling temperature ``temperature``."""
    if not (math.isfinite(temperature) and 0.0 <= temperature <= MAX_TEMPERATURE):
        raise ValueError(
            f"acceptance.temperature={temperature!r}: must be in [0, {MAX_TEMPERATURE}]"
        )
    return max(0.0, 1.0 - TEMPERATURE_SLOPE * temperature)
