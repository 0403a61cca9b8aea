#!/bin/bash
# Byte-identity fixtures of docs/reliability.md section 3: run it on two checkouts and
# compare the two OUT_DIRs (cmp; summary.json but its git_sha/table_path lines).
# usage: scripts/identity/outputs.sh CODE_DIR OUT_DIR
set -e
CODE=$(cd "$1" && pwd); OUT=$2; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$CODE"
export PYTHONPATH=$CODE:$CODE/.pyshim
S="python3 -m capsim simulate -m qwen3.5-35b-a3b -g b200"
# caching pinned off where a case had the old default (vLLM 0.33's default turns it on)
OFF=--no-enable-prefix-caching
$S -w sharegpt --rate 40 -n 600 --seed 3 $OFF -o "$OUT/sim_open" >/dev/null
$S -w sharegpt -c 300 --gmu 0.62 --max-num-seqs 256 -n 900 $OFF -o "$OUT/sim_preempt" >/dev/null
$S -w shared-prefix -c 64 -n 500 --enable-prefix-caching -o "$OUT/sim_prefix" >/dev/null
$S -w sharegpt-multiturn -c 32 -n 400 --enable-prefix-caching -o "$OUT/sim_multiturn" >/dev/null
$S -w sharegpt-multiturn -c 32 -n 400 $OFF -o "$OUT/sim_multiturn_nopc" >/dev/null
$S -w azure-code --replay -n 500 $OFF -o "$OUT/sim_replay" >/dev/null
python3 "$HERE/streaming_summaries.py" > "$OUT/streaming_summaries.txt"
python3 "$HERE/fleet_results.py" > "$OUT/fleet_results.txt"
SW="python3 -m capsim sweep --executor serial --no-progress"
$SW --gmu 0.9 --model qwen3.5-35b-a3b --no-trees --out "$OUT/sweep" >/dev/null 2>&1
PC="--grid experiments/prefix_caching.toml --gmu 0.9 -n 200"
$SW $PC --workload shared-prefix --out "$OUT/sweep_pc_sp" >/dev/null 2>&1
$SW $PC --workload sharegpt-multiturn --out "$OUT/sweep_pc_mt" >/dev/null 2>&1
echo done
