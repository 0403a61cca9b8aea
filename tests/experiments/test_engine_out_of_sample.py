"""Real vLLM 0.26 on the H200 vs capsim (issue 21): recomputed from the committed files.

What holds is asserted against issue 21's thresholds; where capsim misses, the miss is
asserted as the stated gap (so the table cannot silently turn into a pass or a worse miss
without this test and experiments/engine/README.md being updated). No run is re-fitted
here: the delta column's constant comes from its one PLAN.md fit run (20:01), main c4fa656's
engine terms from their three fit runs (PLAN.md, addition stamped 23:35), the async step
period's five constants from its four fit runs (PLAN.md 2026-12-02 05:20 / 05:44; recomputed
in test_engine_period.py), and this test recomputes the first two fits from the committed files.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from factories import decode_shape, prefill_shape

from capsim.config import EngineConfig, SimConfig, SpecDecodeConfig
from capsim.cost.engine_overhead import (
    FULL,
    MEASURED_H200_VLLM026,
    NONE,
    PIECEWISE,
    HostBoundStepTime,
    graph_mode,
)
from capsim.live.client_roundtrip import FIT_RUNS as ROUND_TRIP_FIT_RUNS
from capsim.live.engine_fit import FIT_RUNS as ENGINE_FIT_RUNS
from capsim.live.engine_fit import first_steps, fit_engine_overhead
from capsim.live.engine_oos import FIT_RUNS, THRESHOLDS, table, within
from capsim.memory.cudagraph import capture_descs

ROOT = Path(__file__).resolve().parents[2] / "experiments" / "engine"
G09 = ("g090_k3_rand_c16", "g090_k3_rand_c64")
G06 = ("g060_k3_rand_c64", "g060_k3_rand_c128", "g060_k3_rand_c256", "g060_k3_sg_c256")
CALLS12 = ("g090_k3_rand_c1", *G09, *G06)
THR, TTFT, P99, TPOT, PEAK = (
    "throughput_tok_per_s",
    "ttft_mean_ms",
    "ttft_p99_ms",
    "tpot_mean_ms",
    "peak_running",
)
# Main c4fa656's engine column (capsim + --engine-overhead measured-h200-vllm0.26 as main priced
# it: max(kernels, host) + delta; column "capsim_main") on every predict run of its fit:
# "ok" = within issue 21's threshold; "+" / "-" = a miss of that sign (README: stated gaps).
# Since 2026-12-02 (PLAN.md 01:57) every column runs vLLM 0.26's async scheduling (the real
# servers' mode); verdicts it moved, all mean TTFT (sync -> async): k=3 c16 -41% -> +15%, k=3
# c64 -47% -> -11%, k=0 c64 -39% -> +0.1% (these three were seen before the rule was written),
# gmu 0.6 c128 +19.6% -> +21.6% (now a miss); mean TPOT k=3 c64 +13% -> +8.6% (now inside).
MAIN_VERDICTS: dict[str, dict[str, str]] = {
    "g090_k3_rand_c1": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k3_rand_c16": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k3_rand_c64": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g060_k3_rand_c64": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g060_k3_rand_c128": {THR: "-", TTFT: "+", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g060_k3_rand_c256": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g060_k3_sg_c256": {THR: "-", TTFT: "+", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k0_rand_c1": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    # k=0 verdicts moved with the round-6 rerun's T=1 GDN rows (2026-12-02 00:30 UTC, calibration
    # data, nothing fitted to these runs): c64 throughput -7% -> -12% (now a miss), c256 mean
    # TPOT +11% -> +10.0% (now inside the 10% threshold; +8.2% with async scheduling)
    "g090_k0_rand_c64": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k0_rand_c256": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    # calls 6-7 (2026-12-02, session 3): first seen with async scheduling and the engine terms
    # as they stood (PLAN.md 02:05 and 01:57; nothing fitted to them)
    "g090_k1_rand_c1_nolog": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k1_rand_c1": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k1_rand_c64": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090m16_k3_rand_c64": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090m16_k3_rand_c256": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090m16_k3_sg_c64": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    # Poisson 8 req/s: capsim drew its own arrivals (PLAN.md 20:01) until session 15; since PLAN.md
    # 2026-12-04 22:04 every open-loop run replays the real send times (peak running - -> ok)
    "g090m16_k3_rand_r8": {THR: "ok", TTFT: "-", P99: "ok", TPOT: "ok", PEAK: "ok"},
    # calls 9-10 (2026-12-02, session 4): predict runs (PLAN.md 05:10), first simulated by main
    # c4fa656's model (the engine terms and async scheduling as they stood; nothing fitted to them)
    "g090pc_k0_sg_c64": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    # vLLM 0.26's align-mode cut (session 12, read after the run was seen): a 1024-token prompt
    # (shorter than a 1056-token block) is no longer held back a step: throughput -10.9% -> -8.6%
    "g090pc_k0_rand_c128": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g075_k1_sg_c64": {THR: "ok", TTFT: "-", P99: "-", TPOT: "ok", PEAK: "ok"},
    # calls 14-15 (2026-12-02, session 5): predict runs for every column (PLAN.md 07:58), first
    # simulated by main 460846f's code (these engine terms as refitted on the round-8 tables;
    # nothing fitted to them; g060_k3_in2048_c64 was skipped by call 14's deadline)
    "g060_k3_sg_c64": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g060_k3_rand_r8": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g060m256_k0_sg_c256": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g060m256_k0_rand_c128": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    # calls 18-21 (2026-12-02, session 6): predict runs for every column (PLAN.md 16:30, 16:59),
    # first simulated by main 4ce60b2's code (round-9 tables, the engine terms refit on them from
    # the same three fit runs); nothing fitted to them
    "g060_k3_in2048_c64": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g060m256_k1_sg_c128": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    # Poisson 16 req/s ShareGPT-like at the gmu 0.6 knee: capsim's queue is longer (TTFT high)
    "g060m256_k1_sg_r16": {THR: "-", TTFT: "+", P99: "+", TPOT: "+", PEAK: "ok"},
    "g090pc_k1_sg_c64": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    # call 24 (session 7): g075_k1_sg_r16, a predict run since PLAN.md 05:10 (skipped by call 10's
    # deadline); calls 22-23 (session 7, PLAN.md 21:20): k=2 and k=5 predict runs, first
    # simulated by main 89707f8's code; nothing fitted to them
    "g075_k1_sg_r16": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "+"},
    "g090_k2_sg_c64": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k2_rand_c16": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k2_sg_r12": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "+"},
    "g090_k5_sg_c64": {THR: "-", TTFT: "ok", P99: "-", TPOT: "+", PEAK: "ok"},
    "g090_k5_rand_c1": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    # calls 25-27 (session 9, PLAN.md 2026-12-03 06:45 / 13:08): first simulated by main
    # b772ae6's code; nothing fitted to them. The same configs as g090m16_k3_sg_c64 (a fit run),
    # g090m16_k3_rand_c1 and g090_k2_sg_c64 ran faster on this machine (2851 vs 2702 tok/s,
    # 2924 vs 2768): the host-bound step varies 5-20% machine to machine
    "g090m16_k3_sg_c64_r2": {THR: "-", TTFT: "-", P99: "-", TPOT: "+", PEAK: "ok"},
    "g090m16_k3_rand_c1_r2": {THR: "-", TTFT: "+", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k2_sg_c64_r2": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k8_sg_c64": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    # calls 30-31 (session 11, PLAN.md 2026-12-03 16:30 / 23:40): first simulated by main
    # aacbede's code; nothing fitted to them. g090_k2_sg_c64_r3's host-bound steps ran ~45%
    # slower than the two earlier k=2 runs' (PIECEWISE median 84 vs 54-59 ms) and a 1 s JIT
    # stall held its first 63 requests (TTFT ~1.48 s): repeatability.md
    "g090_k4_sg_c64": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k4_rand_c1": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k2_sg_c64_r3": {THR: "ok", TTFT: "-", P99: "-", TPOT: "ok", PEAK: "ok"},
    # calls 35-39 (session 12, PLAN.md 2026-12-04 00:25-01:42): first simulated by main 517db14's
    # code; nothing fitted to them. This machine's mixed steps ran at PIECEWISE 54-60 ms and eager
    # 117-132 ms (main prices 75.8 / 144.7 ms + 4.54 us/tok): prefill-heavy shared prefixes run slow
    "g090_k0_pc_sp_c64": {THR: "-", TTFT: "ok", P99: "+", TPOT: "+", PEAK: "ok"},
    "g090_k1_pc_sp_c64": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k6_sg_c64": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k0_pc_sp_c128": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k0_pc_sp_c16": {THR: "-", TTFT: "ok", P99: "+", TPOT: "+", PEAK: "ok"},
    # calls 40-42 (session 13, PLAN.md 2026-12-04 02:11): first simulated by main 9e09bfb's code;
    # nothing fitted to them. A slower host than session 12's (host-fit on g090_k2_sg_c64_r4:
    # PIECEWISE 73.8 ms, eager 153.8 ms)
    "g090_k2_sg_c64_r4": {THR: "ok", TTFT: "-", P99: "-", TPOT: "+", PEAK: "ok"},
    "g090_k2_rand_c16_r2": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k2_sg_r12_r2": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "+"},
    "g090_k1_pc_sp_c128": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k0_pc_sp_c64_r2": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    # calls 43 and 45 (session 14, PLAN.md 2026-12-04 18:49-19:05): first simulated by main
    # 606e5f8's code; nothing fitted to them (main's column has no client round trip)
    "g090_k2_sg_c32": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k2_sg_c96": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k2_sg_r8": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "+"},
    "g090_k0_sg_c32": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k0_sg_r10": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "+"},
    # call 46 (session 15, PLAN.md 2026-12-04 19:47 and 21:31): first simulated by main 951c9cb's
    # code; nothing fitted to them
    "g090_k2_sg_c48": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k2_sg_c128": {THR: "-", TTFT: "ok", P99: "-", TPOT: "+", PEAK: "ok"},
}
CALLS67 = tuple(n for n in MAIN_VERDICTS if n.startswith(("g090_k1_", "g090m16_")))
# calls 9-10, predict; g075_k1_sg_r16 (the same PLAN.md line) ran in call 24 (session 7)
S4 = ("g090pc_k0_sg_c64", "g090pc_k0_rand_c128", "g075_k1_sg_c64", "g075_k1_sg_r16")
# calls 14-15 (session 5), predict (k=3 gmu 0.6 max_num_seqs 256; k=0 gmu 0.6 max_num_seqs 256)
S5 = ("g060_k3_sg_c64", "g060_k3_rand_r8", "g060m256_k0_sg_c256", "g060m256_k0_rand_c128")
# calls 18-21 (session 6), predict (k=3 gmu 0.6 mns256 random 2048/256; k=1 gmu 0.6 mns256
# ShareGPT-like c128 and Poisson 16/s; k=1 gmu 0.9 prefix caching on ShareGPT-like c64)
S6 = ("g060_k3_in2048_c64", "g060m256_k1_sg_c128", "g060m256_k1_sg_r16", "g090pc_k1_sg_c64")
# calls 22-23 (session 7), predict (k=2 and k=5 at gmu 0.9, PLAN.md 2026-12-02 21:20)
S7 = ("g090_k2_sg_c64", "g090_k2_rand_c16", "g090_k2_sg_r12", "g090_k5_sg_c64", "g090_k5_rand_c1")
# calls 25-27 (session 9), predict (repeats on one machine; k=8 at gmu 0.9)
S9 = ("g090m16_k3_sg_c64_r2", "g090m16_k3_rand_c1_r2", "g090_k2_sg_c64_r2", "g090_k8_sg_c64")
# calls 30-31 (session 11), predict (k=4; k=2 ShareGPT-like c64 on a third machine)
S11 = ("g090_k4_sg_c64", "g090_k4_rand_c1", "g090_k2_sg_c64_r3")
# calls 35-39 (session 12), predict (shared prefixes with prefix caching: k=0 at 64, 128 and 16
# clients, k=1 at 64; k=6 ShareGPT-like at 64)
S12 = (
    "g090_k0_pc_sp_c64",
    "g090_k1_pc_sp_c64",
    "g090_k6_sg_c64",
    "g090_k0_pc_sp_c128",
    "g090_k0_pc_sp_c16",
)
# calls 40-42 (session 13), predict (PLAN.md 2026-12-04 02:11: a fourth k=2 machine at c64, c16
# and Poisson 12/s; k=1 shared prefixes at 128 clients; k=0 shared prefixes at 64 again)
S13 = (
    "g090_k2_sg_c64_r4",
    "g090_k2_rand_c16_r2",
    "g090_k2_sg_r12_r2",
    "g090_k1_pc_sp_c128",
    "g090_k0_pc_sp_c64_r2",
)
# calls 43 and 45 (session 14), predict (PLAN.md 2026-12-04 18:49-19:05: k=2 ShareGPT-like at 32
# and 96 clients and Poisson 8/s, k=0 at 32 clients and Poisson 10/s; the round-trip rule's test)
S14 = ("g090_k2_sg_c32", "g090_k2_sg_c96", "g090_k2_sg_r8", "g090_k0_sg_c32", "g090_k0_sg_r10")
# call 46 (session 15), predict (PLAN.md 2026-12-04 19:47, 21:31: k=2 ShareGPT-like at 48 and
# 128 clients; the two-batch pipeline recurrence's pre-registered test)
S15 = ("g090_k2_sg_c48", "g090_k2_sg_c128")
# Session 14 (PLAN.md 2026-12-04 18:49): the client round-trip rule (a sent request reaches the
# scheduler 22.7 ms after its send, no async lateness on top of the deferred output) moved 24
# of these verdicts (each run's before / after: experiments/engine/roundtrip_study.csv) and made
# its four FIT runs, g090_k2_sg_c64 and _r2-_r4, fit runs of this column (removed below); then
# the two-batch pipeline recurrence (PLAN.md 19:35, no new constant: a graph step right after a
# host-bound one is hidden under it) moved 24 more (roundtrip_study.csv: before / rule / both).
# The async step period (column "capsim_engine": capsim.cost.engine_period, FROZEN at 279d2dd,
# PLAN.md 2026-12-02 05:49) on every predict run of its fit (19 of 23; the four fit runs are
# g090_k0_rand_c1, g090_k1_rand_c1, g090_k3_rand_c1_steps, g090m16_k3_sg_c64). The three runs
# of S4 were first read after the freeze; every other run had been seen before the model.
ASYNC_VERDICTS: dict[str, dict[str, str]] = {
    "g060_k3_rand_c128": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    # session 8 pools (held dummy pixels: about 1% smaller at gmu 0.6): TPOT +6.5% -> +12.4%
    "g060_k3_rand_c256": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g060_k3_rand_c64": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g060_k3_sg_c256": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k0_rand_c256": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k0_rand_c64": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k1_rand_c1_nolog": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k1_rand_c64": {THR: "ok", TTFT: "-", P99: "ok", TPOT: "ok", PEAK: "ok"},
    # k=3 at concurrency 1: the real one-request FULL period is 9.7-11.9 ms across these runs
    # (machine / run spread); the fit run's 10.1 ms prices in128 / in4096 fast, call 1's slow
    "g090_k3_in128_c1": {THR: "+", TTFT: "+", P99: "ok", TPOT: "-", PEAK: "ok"},
    "g090_k3_in4096_c1": {THR: "+", TTFT: "ok", P99: "ok", TPOT: "-", PEAK: "ok"},
    "g090_k3_rand_c1": {THR: "-", TTFT: "+", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k3_rand_c16": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k3_rand_c64": {THR: "+", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090m16_k3_rand_c256": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090m16_k3_rand_c64": {THR: "+", TTFT: "-", P99: "-", TPOT: "ok", PEAK: "ok"},
    "g090m16_k3_rand_r8": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "-", PEAK: "-"},
    "g090pc_k0_sg_c64": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    # vLLM 0.26's align-mode cut (session 12): the prompts shorter than a block are admitted a
    # step sooner, as the real counters show (queried tokens 393,216 = real, was 429,056), and
    # capsim's mean TTFT, already low, drops further: -17.0% -> -20.6%
    "g090pc_k0_rand_c128": {THR: "ok", TTFT: "-", P99: "ok", TPOT: "ok", PEAK: "ok"},
    # TPOT -10.04% on the round-9 tables (-9.99988% on round 8, -10.02% on round 7, the
    # frozen model's own tables): on the threshold; a miss since round 9's ingest (session 6)
    "g075_k1_sg_c64": {THR: "+", TTFT: "-", P99: "-", TPOT: "-", PEAK: "ok"},
    # calls 14-15 (session 5): first simulated after the runs were recorded, by main 460846f's
    # code (the async period frozen at 279d2dd, round-8 tables); nothing fitted to them
    "g060_k3_sg_c64": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    # Poisson 8 req/s at the gmu 0.6 knee: the queue forms where capsim's does not (TTFT low)
    "g060_k3_rand_r8": {THR: "+", TTFT: "-", P99: "-", TPOT: "-", PEAK: "ok"},
    # session-8 pools (vision pass re-read: k=0 max_num_seqs 256 pool +1.5%): TTFT -20.02%
    "g060m256_k0_sg_c256": {THR: "+", TTFT: "-", P99: "ok", TPOT: "-", PEAK: "ok"},
    "g060m256_k0_rand_c128": {THR: "ok", TTFT: "-", P99: "-", TPOT: "ok", PEAK: "ok"},
    # calls 18-21 (session 6): first simulated after the runs were recorded, by main 4ce60b2's
    # code (the async period frozen at 279d2dd, round-9 tables); nothing fitted to them
    "g060_k3_in2048_c64": {THR: "+", TTFT: "-", P99: "ok", TPOT: "ok", PEAK: "ok"},
    # session 8 pools: throughput +10.x% -> +8.0%
    "g060m256_k1_sg_c128": {THR: "+", TTFT: "ok", P99: "ok", TPOT: "-", PEAK: "ok"},
    "g060m256_k1_sg_r16": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090pc_k1_sg_c64": {THR: "+", TTFT: "ok", P99: "ok", TPOT: "-", PEAK: "ok"},
    # call 24 and calls 22-23 (session 7): first simulated by main 89707f8's code (the async
    # period frozen at 279d2dd, round-9 tables); nothing fitted to them. k=2 / k=5 under load:
    # the real PIECEWISE (~60 ms) and eager (~120-130 ms) steps are shorter than the k=3 fit's
    # 70.5 / 144.2 ms (step_diagnostic.md), so capsim's queue and TPOT run high
    "g075_k1_sg_r16": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "+"},
    "g090_k2_rand_c16": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k2_sg_r12": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "+"},
    "g090_k5_sg_c64": {THR: "ok", TTFT: "-", P99: "-", TPOT: "ok", PEAK: "ok"},
    # k=5 one request: the real FULL period 10.1 ms is GPU-bound; the host floor 8.02 + 1.03 x
    # (k - 1) = 12.2 ms, fitted at k=1 and k=3, does not extrapolate to k=5
    "g090_k5_rand_c1": {THR: "-", TTFT: "+", P99: "ok", TPOT: "+", PEAK: "ok"},
    # calls 25-27 (session 9): first simulated by main b772ae6's code; nothing fitted to them.
    # k3 m16k sg c64 r2: a fused_moe JIT compile on the first batch (jit_warnings.txt) put
    # the first 64 requests' TTFT at ~1.15 s, so the real p99 is JIT-polluted
    "g090m16_k3_sg_c64_r2": {THR: "ok", TTFT: "-", P99: "-", TPOT: "ok", PEAK: "ok"},
    "g090m16_k3_rand_c1_r2": {THR: "-", TTFT: "+", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k8_sg_c64": {THR: "-", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    # calls 30-31 (session 11): first simulated by main aacbede's code; nothing fitted to them
    "g090_k4_sg_c64": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k4_rand_c1": {THR: "-", TTFT: "+", P99: "ok", TPOT: "+", PEAK: "ok"},
    # calls 35-39 (session 12): first simulated by main 517db14's code; nothing fitted to them.
    # The machine's PIECEWISE (54-60 ms) and eager (117-132 ms) medians sit below the fit's 70.5 /
    # 144.2 ms (repeatability.md: 54-84 / 112-169 ms across machines), so mixed steps run long
    "g090_k0_pc_sp_c64": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k1_pc_sp_c64": {THR: "ok", TTFT: "-", P99: "-", TPOT: "ok", PEAK: "ok"},
    "g090_k6_sg_c64": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k0_pc_sp_c128": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "+", PEAK: "ok"},
    "g090_k0_pc_sp_c16": {THR: "ok", TTFT: "+", P99: "ok", TPOT: "ok", PEAK: "ok"},
    # calls 40-42 (session 13): first simulated by main 9e09bfb's code; nothing fitted to them.
    # The Poisson run's peak running (real 58, capsim 80) and mean TPOT (+23%) miss: at 12 req/s
    # the slower real steps are not what make it run fewer requests at once
    "g090_k2_rand_c16_r2": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k2_sg_r12_r2": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k1_pc_sp_c128": {THR: "+", TTFT: "-", P99: "ok", TPOT: "-", PEAK: "ok"},
    "g090_k0_pc_sp_c64_r2": {THR: "+", TTFT: "ok", P99: "ok", TPOT: "-", PEAK: "ok"},
    # calls 43 and 45 (session 14): the pre-registered test of the client round-trip rule (main
    # 606e5f8; roundtrip_study.md has the code before the rule next to it); nothing fitted to them
    "g090_k2_sg_c32": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k2_sg_c96": {THR: "ok", TTFT: "ok", P99: "-", TPOT: "ok", PEAK: "ok"},
    "g090_k2_sg_r8": {THR: "ok", TTFT: "+", P99: "ok", TPOT: "ok", PEAK: "+"},
    "g090_k0_sg_c32": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k0_sg_r10": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "+"},
    # call 46 (session 15): the pre-registered test of the two-batch pipeline recurrence (main
    # 951c9cb; roundtrip_study.md has the code before the rule and the rule alone next to it)
    "g090_k2_sg_c48": {THR: "ok", TTFT: "ok", P99: "ok", TPOT: "ok", PEAK: "ok"},
    "g090_k2_sg_c128": {THR: "ok", TTFT: "ok", P99: "-", TPOT: "+", PEAK: "ok"},
}

# per metric, predict runs within the threshold: (main c4fa656, async) over the async model's
# 50 predict runs, over the 4 runs of calls 9-10 and 24, the 4 of calls 14-15, the 4 of calls
# 18-21, the 4 of calls 22-23 (5 less the round-trip fit run), the 3 of calls 25-27, the 2 of
# calls 30-31, the 5 of calls 35-39, the 4 of calls 40-42, the 5 of calls 43 and 45 and the 2 of
# call 46 (53 in all)
# (out_of_sample.md's
# pass-count table)
PASS_COUNTS: dict[str, tuple[int, ...]] = {
    # session-8 pools: g060m256_k1_sg_c128 +8.0%
    # session 12's 0.26 align-mode cut: g090pc_k0_rand_c128 main -10.9% -> -8.6%
    # session 14: the round-trip rule's four fit runs left the predict set; calls 43 and 45;
    # the two-batch pipeline recurrence (async 31 / 31 / 43 / 31 / 45 of 51; with the rule alone
    # 31 / 31 / 42 / 25 / 45)
    # session 15: call 46's two runs (async 2 / 2 / 1 / 1 / 2 of 2); then the open-loop runs
    # replay the real client's send times (PLAN.md 2026-12-04 22:04, arrival_replay_study.md):
    # main TTFT 45 -> 46, peak 47 -> 48; async TTFT 33 -> 34, TPOT 32 -> 33, peak 47 -> 48
    THR: (22, 35, 3, 3, 3, 2, 3, 1, 1, 3, 0, 1, 0, 1, 0, 5, 3, 2, 2, 5, 0, 2),
    # session-8 pools: g060m256_k0_sg_c256 -20.02%
    # session 12's 0.26 align-mode cut: g090pc_k0_rand_c128 async -17.0% -> -20.6%
    TTFT: (46, 34, 3, 2, 4, 1, 3, 3, 4, 2, 1, 1, 2, 1, 5, 3, 4, 3, 5, 4, 2, 2),
    P99: (46, 44, 3, 3, 4, 2, 3, 4, 3, 3, 2, 2, 2, 2, 3, 4, 4, 4, 5, 4, 1, 1),
    # round-9 tables: g075_k1_sg_c64 -10.04%; session-8 pools: g060_k3_rand_c256 +12.4%
    TPOT: (15, 33, 1, 2, 2, 2, 3, 2, 0, 3, 0, 1, 0, 1, 0, 4, 2, 2, 0, 5, 0, 1),
    PEAK: (48, 48, 3, 3, 4, 4, 4, 4, 3, 3, 3, 3, 2, 2, 5, 5, 3, 4, 3, 3, 2, 2),
}


@pytest.fixture(scope="module")
def computed() -> tuple[pd.DataFrame, float]:
    return table(ROOT / "runs", ROOT / "startups.csv")


def _row(df: pd.DataFrame, run: str, metric: str) -> pd.Series:
    hit = df[(df["run"] == run) & (df["metric"] == metric)]
    assert len(hit) == 1, (run, metric)
    return hit.iloc[0]


def test_table_recomputes_to_the_committed_numbers(computed):
    df, _ = computed
    old = pd.read_csv(ROOT / "out_of_sample.csv")
    assert list(old["run"]) == list(df["run"]) and list(old["metric"]) == list(df["metric"])
    cols = ("real", "capsim", "capsim_delta", "capsim_main", "capsim_engine")
    for col in (*cols, "capsim_engine_real_blocks", "capsim_engine_sync"):
        pd.testing.assert_series_equal(old[col], df[col], rtol=1e-5, check_names=False)


def test_fit_is_one_run_one_constant(computed):
    df, delta_s = computed
    assert FIT_RUNS == ("g090_k3_rand_c1",)
    assert 0 < delta_s < 2e-3  # 0.25 ms per step; a sign or unit slip would leave this range
    fit = _row(df, "g090_k3_rand_c1", TPOT)
    assert abs(fit["capsim_delta"] - fit["real"]) < 1e-3 * fit["real"]
    assert set(df[df["role"] == "fit"]["run"]) == set(FIT_RUNS)


def test_engine_constants_are_the_fit_of_the_committed_step_logs(computed):
    """The shipped constants equal the PLAN.md fit recomputed from the three fit runs."""
    df, _ = computed
    got = fit_engine_overhead(ROOT / "runs")
    assert asdict(got) == pytest.approx(asdict(MEASURED_H200_VLLM026), rel=1e-9)
    assert MEASURED_H200_VLLM026.fit_runs == ENGINE_FIT_RUNS
    assert set(df[df["role_main"] == "fit"]["run"]) == set(ENGINE_FIT_RUNS)
    assert not set(MAIN_VERDICTS) & set(ENGINE_FIT_RUNS)
    # in sample: the fitted step reproduces each fit run's median first-step latency
    k3 = SpecDecodeConfig(num_spec_tok=3)
    from capsim.cost.calibrated import CalibratedStepTime
    from capsim.gpus import get_gpu
    from capsim.models import get_model

    base = CalibratedStepTime.from_config(get_model("qwen3.5-35b-a3b"), get_gpu("H200"), 1, k3)
    descs = capture_descs(
        vllm_version="0.26", max_num_seqs=1024, num_spec_tok=3, max_num_batched_tokens=8192
    )
    eng = HostBoundStepTime(base, MEASURED_H200_VLLM026, descs)
    for run in ENGINE_FIT_RUNS:
        fs = first_steps(ROOT / "runs" / run)
        shape = prefill_shape(int(fs["num_tok"].iloc[0]))
        assert eng.step_time_s(shape) == pytest.approx(float(np.median(fs["lat_s"])), rel=1e-9)


def test_graph_modes_follow_vllm_026_capture_sizes():
    d3 = capture_descs(vllm_version="0.26", max_num_seqs=1024, num_spec_tok=3,
                       max_num_batched_tokens=8192)  # fmt: skip
    d0 = capture_descs(vllm_version="0.26", max_num_seqs=1024, num_spec_tok=0,
                       max_num_batched_tokens=8192)  # fmt: skip
    # the H200 start-ups: "PIECEWISE=49 (largest=512), FULL=49" at k=3, 51 / 51 at k=0
    assert (d3.count("PIECEWISE"), d3.count("FULL"), d3.largest_tok) == (49, 49, 512)
    assert (d0.count("PIECEWISE"), d0.count("FULL"), d0.largest_tok) == (51, 51, 512)
    assert graph_mode(decode_shape(1, 3), d3) == FULL
    assert graph_mode(decode_shape(128, 3), d3) == FULL  # 512 tokens
    assert graph_mode(decode_shape(129, 3), d3) == NONE  # 516 tokens: eager, decode or not
    assert graph_mode(decode_shape(256, 0), d0) == FULL
    assert graph_mode(prefill_shape(128), d3) == PIECEWISE
    assert graph_mode(prefill_shape(512), d3) == PIECEWISE
    assert graph_mode(prefill_shape(1024), d3) == NONE


def test_engine_overhead_is_off_by_default():
    from capsim.cost.calibrated import CalibratedStepTime
    from capsim.cost.factory import build_step_time_model
    from capsim.gpus import get_gpu
    from capsim.models import get_model

    cfg = SimConfig()
    assert cfg.engine.engine_overhead is None
    assert "engine_overhead" not in cfg.to_dict()["engine"]  # sweep point ids unchanged
    cost = build_step_time_model(cfg, get_model(cfg.model), get_gpu(cfg.gpu))
    assert isinstance(cost, CalibratedStepTime)
    with pytest.raises(ValueError, match=r"engine\.engine_overhead='x'"):
        EngineConfig(engine_overhead="x")
    # a fit of one deployment: another release (or GPU, model, tp) is refused, naming it
    other = SimConfig(engine=EngineConfig(engine_overhead="measured-h200-vllm0.26"))
    with pytest.raises(ValueError, match=r"got vllm_version='0\.33'"):
        build_step_time_model(other, get_model(other.model), get_gpu(other.gpu))


def _check_verdicts(df: pd.DataFrame, verdicts: dict, col: str, err: str) -> None:
    for run, by_metric in verdicts.items():
        for metric, want in by_metric.items():
            r = _row(df, run, metric)
            ok = within(metric, r["real"], r[col])
            if want == "ok":
                assert ok, (run, metric, r[err])
            else:
                assert not ok and math.copysign(1, r[err]) == (1 if want == "+" else -1), (
                    run,
                    metric,
                    r[err],
                )


def test_main_column_verdicts(computed):
    """Issue 21's thresholds on main c4fa656's engine terms, every predict run of their fit:
    passes asserted as passes, misses as the stated gaps (their sign)."""
    df, _ = computed
    assert set(df[df["role_main"] == "predict"]["run"]) == set(MAIN_VERDICTS)
    _check_verdicts(df, MAIN_VERDICTS, "capsim_main", "err_main_pct")


def test_async_period_column_verdicts(computed):
    """The same on the async step period, every predict run of its fit (4 fit runs)."""
    df, _ = computed
    fit = set(df[df["role_engine"] == "fit"]["run"])
    assert fit == {"g090_k0_rand_c1", "g090_k1_rand_c1", "g090_k3_rand_c1_steps",
                   "g090m16_k3_sg_c64", "g090_k2_sg_c64", "g090_k2_sg_c64_r2",
                   "g090_k2_sg_c64_r3", "g090_k2_sg_c64_r4"}  # fmt: skip
    assert set(df[df["role_engine"] == "predict"]["run"]) == set(ASYNC_VERDICTS)
    _check_verdicts(df, ASYNC_VERDICTS, "capsim_engine", "err_engine_pct")


def test_pass_counts_old_and_new(computed):
    """Per metric: how many of the async model's predict runs pass, main vs async, all of
    them, the three runs of calls 9-10 (read only after the freeze) and the four of calls
    14-15 (recorded after main 460846f's model)."""
    df, _ = computed
    pred = df[df["role_engine"] == "predict"]
    every = set(S4) | set(S5) | set(S6) | set(S7) | set(S9) | set(S11) | set(S12) | set(S13)
    assert every | set(S14) | set(S15) <= set(pred["run"]) | set(ROUND_TRIP_FIT_RUNS)
    for metric, want in PASS_COUNTS.items():
        rows = pred[pred["metric"] == metric]
        got = []
        groups = (S4, S5, S6, S7, S9, S11, S12, S13, S14, S15)
        subsets = (rows, *(rows[rows["run"].isin(g)] for g in groups))
        for sel in subsets:
            for col in ("capsim_main", "capsim_engine"):
                got.append(
                    sum(bool(within(metric, r.real, getattr(r, col))) for r in sel.itertuples())
                )
        assert tuple(got) == want, (metric, got)


def test_what_holds(computed):
    df, _ = computed
    for run in G09:  # closed loop, memory not binding: admitted = concurrency
        r = _row(df, run, PEAK)
        assert within(PEAK, r["real"], r["capsim_delta"])
    # k=3 at max_num_batched_tokens 16384, 256 clients: the pool binds at gmu 0.9 (real 166
    # running, 27 preemptions); capsim on the real 2185 blocks (issue 25's session-3 plan has
    # exactly that many) admits 168 and preempts 27 (the placeholders' early KV reservation
    # is not mirrored: capsim may admit a little more)
    r = _row(df, "g090m16_k3_rand_c256", PEAK)
    assert r["real"] == 166 and r["capsim_engine_real_blocks"] == 168 and within(PEAK, 166, 168)
    pre = _row(df, "g090m16_k3_rand_c256", "preemptions")
    assert pre["real"] == 27 and pre["capsim_engine_real_blocks"] == 27
    for run in ("g090_k3_rand_c64", "g060_k3_rand_c64"):
        r = _row(df, run, P99)
        assert within(P99, r["real"], r["capsim_delta"])
    # the scheduler given the real pool: admitted requests at the memory-bound knee match
    for run in G06:
        r = _row(df, run, PEAK)
        assert r["real"] == 44 and r["capsim_engine_real_blocks"] == r["real"]
    # the memory plan (issue 25's wing: 596 blocks where vLLM has 580, was 704): capsim's own
    # pool admits 45 requests at the knee, real 44, within issue 21's 5 %
    for run in G06:
        r = _row(df, run, PEAK)
        assert r["capsim_delta"] == 45 and within(PEAK, r["real"], r["capsim_delta"])
    # k=0 decode under load, kernels only (capsim as shipped): within 5 % of the real TPOT
    # (+4.8 % / -3.5 % on the round-6 rerun's T=1 rows; -2 % / -3 % on the first round-6 tables)
    for run in ("g090_k0_rand_c64", "g090_k0_rand_c256"):
        r = _row(df, run, TPOT)
        assert abs(r["err_capsim_pct"]) < 5, (run, r["err_capsim_pct"])


def test_stated_gaps_of_calls_1_2(computed):
    """The misses experiments/engine/README.md states for calls 1-2 (delta column)."""
    df, _ = computed
    for run in CALLS12:
        if run in FIT_RUNS:
            continue
        thr = _row(df, run, THR)  # capsim too fast: +25..+60%
        assert not within(THR, thr["real"], thr["capsim_delta"])
        assert thr["err_delta_pct"] > 10
        ttft = _row(df, run, TTFT)  # prefill: real 145 ms for 1024 tok at c=1
        assert ttft["err_delta_pct"] < -20 and ttft["capsim_delta"] + 15 < ttft["real"]
        tpot = _row(df, run, TPOT)  # decode under load: -9..-37% (c16 -8.9% on the rerun tables)
        assert tpot["err_delta_pct"] < -8
    c1 = _row(df, "g090_k3_rand_c1", TTFT)
    assert c1["real"] > 3 * c1["capsim"]


def test_synthetic_acceptance_matches_the_rates_given():
    """Measured per-position acceptance within 4 binomial standard errors of the rate the
    server was given (n = the run's drafts: ~650 at concurrency 1, 5,000-41,000 loaded)."""
    rates = tuple(0.8522**depth for depth in range(1, 9))  # depths 1-8
    seen = 0
    for d in sorted((ROOT / "runs").iterdir()):
        if json.loads((d / "server.json").read_text())["num_speculative_tokens"] == 0:
            continue
        s = json.loads((d / "bench_summary.json").read_text())
        got = s["spec_decode_per_position_acceptance_rates"]  # fractions
        n = json.loads((d / "counters_delta.json").read_text())["vllm:spec_decode_num_drafts_total"]
        for g, r in zip(got, rates[: len(got)], strict=True):
            assert abs(g - r) < 4 * math.sqrt(r * (1 - r) / n), (d.name, got, n)
        seen += 1
    # 10 at k=3 (calls 1-4), 3 at k=1 (call 6: rate 0.8522), 4 at k=3 (call 7), 1 at k=1 (call
    # 10), 2 at k=3 (call 14), 1 at k=3 (call 18), 3 at k=1 (calls 19, 21), 3 at k=2 (call 22),
    # 2 at k=5 (call 23), 1 at k=1 (call 24), 2 at k=3 (call 25), 1 at k=2 (call 26), 1 at k=8
    # (call 27), 2 at k=4 (call 30), 1 at k=2 (call 31), 1 at k=1 (call 35), 1 at k=6 (call 37),
    # 3 at k=2 (call 40), 1 at k=1 (call 41), 3 at k=2 (call 43), 2 at k=2 (call 46)
    assert seen == 48


def test_async_scheduling_is_what_moved_ttft(computed):
    """PLAN.md 2026-12-02 01:57: vLLM 0.26 ran with async scheduling; the engine column
    runs it, the sync diagnostic column does not. On every loaded closed-loop run of calls
    6-7 (unseen when the rule was written) sync capsim's mean TTFT is 50-55% low and async
    capsim's within 20%."""
    df, _ = computed
    for run in ("g090_k1_rand_c64", "g090m16_k3_rand_c64", "g090m16_k3_sg_c64"):
        r = _row(df, run, TTFT)
        assert r["err_engine_sync_pct"] < -50, (run, r["err_engine_sync_pct"])
        assert within(TTFT, r["real"], r["capsim_main"]), (run, r["err_main_pct"])
    # at concurrency 1 the two are the same (a request meets an idle engine)
    for run in ("g090_k3_rand_c1", "g090_k1_rand_c1", "g090_k0_rand_c1"):
        for m in (TTFT, TPOT, THR):
            r = _row(df, run, m)
            assert r["capsim_engine_sync"] == pytest.approx(r["capsim_main"], rel=1e-12)


def test_thresholds_are_the_issues():
    assert THRESHOLDS == {
        "throughput_tok_per_s": (0.10, 0.0),
        "tpot_mean_ms": (0.10, 0.0),
        "ttft_mean_ms": (0.20, 15.0),
        "ttft_p99_ms": (0.30, 0.0),
        "peak_running": (0.05, 0.0),
    }


def test_config_names_the_shipped_engine_overheads() -> None:
    """capsim.config validates --engine-overhead against its own name list (no import from
    cost/); the list must be exactly the fits capsim.cost.engine_overhead ships."""
    from capsim.config import ENGINE_OVERHEAD_NAMES, EngineConfig
    from capsim.cost.engine_overhead import ENGINE_OVERHEADS

    assert set(ENGINE_OVERHEAD_NAMES) == set(ENGINE_OVERHEADS)
    with pytest.raises(ValueError, match="engine_overhead='nope'"):
        EngineConfig(engine_overhead="nope")


def test_prefix_hit_tokens_of_the_shared_prefix_runs(computed):
    """PLAN.md 2026-12-04 00:25 (before the runs): k=0 hits one 1056-token block per request
    whose system prompt is cached (515,328 tokens, counted once per request as vLLM 0.27+
    counts); with MTP (k=1) align mode drops the last matched block, so a 2,048-token system
    prompt yields no hit at all. Real vLLM 0.26: 0 at k=1 (as predicted); 521,664 / 534,336 /
    110,880 at k=0 (c64 / c128 / c16) and 1,182,644 tokens looked up where the 512 prompts hold
    1,164,024. Two 0.26 rules read in the wheels AFTER these runs were seen (so these are seen
    runs for the two counters): the stats are recorded on every lookup of a waiting request
    (vllm_rules "prefix_stats_at_admission") and the align-mode cut floors only chunks ending
    before the last whole block ("align_split_to_prefill_end"). With both, capsim's counters
    land within 1% (c64: hits exact, queries +0.01%); every earlier prefix-caching run's queried
    tokens equal the real ones exactly."""
    df, _ = computed
    k1 = _row(df, "g090_k1_pc_sp_c64", "prefix_hit_tok")
    assert k1["real"] == 0 and k1["capsim_engine"] == 0
    prompts_tok = {"g090_k0_pc_sp_c64": 1164024, "g090_k0_pc_sp_c128": 1164024}
    for run in ("g090_k0_pc_sp_c64", "g090_k0_pc_sp_c128", "g090_k0_pc_sp_c16"):
        r = _row(df, run, "prefix_hit_tok")
        assert r["real"] % 1056 == 0 and r["capsim_engine"] % 1056 == 0, run  # whole blocks
        # session 14's pipeline recurrence moved the 16-client run's hits by 3 blocks (+2.9%)
        tol = 0.03 if run == "g090_k0_pc_sp_c16" else 0.02
        assert abs(r["capsim_engine"] / r["real"] - 1) < tol, (run, r["real"], r["capsim_engine"])
        q = _row(df, run, "prefix_query_tok")
        if run in prompts_tok:  # looked up more than once: both count every lookup
            assert q["real"] > prompts_tok[run] and q["capsim_engine"] > prompts_tok[run]
        # (and its queried tokens by +1.7%: lookups of requests that wait a step longer)
        assert abs(q["capsim_engine"] / q["real"] - 1) < (0.02 if run.endswith("c16") else 0.01), (
            run,
            q["real"],
        )
    assert _row(df, "g090_k0_pc_sp_c64", "prefix_hit_tok")["capsim_engine"] == 521664
    for run in ("g090pc_k0_rand_c128", "g090pc_k0_sg_c64", "g090pc_k1_sg_c64"):
        q = _row(df, run, "prefix_query_tok")
        assert q["capsim_engine"] == q["real"], (run, q["real"], q["capsim_engine"])
