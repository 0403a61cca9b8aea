#!/usr/bin/env bash
# Run a job list against a real vLLM 0.26.0 on the lent H200 (one device call).
#
#   bash .devstage/engine/engine_device.sh JOBS.json DEADLINE_S
#   bash .devstage/engine_p1/engine_device.sh --stage     (first of two calls, see below)
#
# A payload over the device call's carry limit (64 MiB with the checkout) travels in pieces:
# `split -b` the archive into NAME.tar.xz.part1, .part2, ...; a short first call with
# `--stage` leaves the pieces it carries in /tmp/capsim_stage, the next call (same machine,
# back to back) carries the rest and the pieces are joined in name order and checked against
# MANIFEST.json. Once a part is unpacked (its sha256 recorded under /tmp/capsim_engine) later
# calls on that machine need not carry it at all.
#
# The folder this script lies in (.devstage/engine/, carried with the call) holds the
# payload built by scripts/engine_payload.py (site.tar.xz, model.tar.xz, MANIFEST.json),
# engine_runner.py + engine_jobs.py, the job lists and optionally datasets/*.jsonl[.xz] (copied
# into the model dir's datasets/ on every call). The payload is unpacked to
# /tmp/capsim_engine once per machine (skipped when the sha256 of the carried file matches
# what was unpacked:
# the machine keeps /tmp between back-to-back calls); compile caches live under
# /tmp/capsim_cache so a second start-up on the same machine is warm.
# Results: $OUT/engine_results.tar.xz (re-packed after every job) and $OUT/device.log.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
STAGE=${CAPSIM_ENGINE_STAGE:-/tmp/capsim_stage}
if [ "${1:-}" = "--stage" ]; then
    mkdir -p "$STAGE" && cp "$HERE"/*.part* "$STAGE"/ && ls -l "$STAGE" && exit 0
    echo "engine_device: --stage found no *.part* file in $HERE"; exit 3
fi
JOBS=${1:?job list}
DEADLINE_S=${2:?deadline seconds}
T0=$(date +%s)
ROOT=${CAPSIM_ENGINE_ROOT:-/tmp/capsim_engine}
CACHE=${CAPSIM_ENGINE_CACHE:-/tmp/capsim_cache}
mkdir -p "$ROOT" "$CACHE" "${OUT:?OUT unset}"
exec > >(tee -a "$OUT/device.log") 2>&1
echo "engine_device: $(date -u +%FT%TZ) boot_id $(cat /proc/sys/kernel/random/boot_id)"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader || true
for part in site model; do
    want=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['files'][sys.argv[2]]['sha256'])" \
        "$HERE/MANIFEST.json" "$part.tar.xz")
    if [ "$(cat "$ROOT/$part.sha256" 2>/dev/null)" = "$want" ]; then
        echo "engine_device: $part already unpacked (sha256 matches)"; continue
    fi
    src="$HERE/$part.tar.xz"
    if [ ! -f "$src" ]; then  # pieces: the staged ones and the carried ones, in name order
        src="$STAGE/$part.tar.xz"
        ls "$STAGE/$part.tar.xz.part"* "$HERE/$part.tar.xz.part"* 2>/dev/null \
            | awk -F/ '{print $NF "\t" $0}' | sort | cut -f2 | xargs cat > "$src"
    fi
    have=$(sha256sum "$src" | cut -d' ' -f1)
    if [ "$have" != "$want" ]; then
        echo "engine_device: $part.tar.xz sha256 $have != manifest $want (pieces missing?)"; exit 3
    fi
    rm -rf "${ROOT:?}/$part" && mkdir -p "$ROOT/$part"
    xz -d -T0 -c "$src" | tar -x -C "$ROOT/$part" || { echo "unpack $part failed"; exit 3; }
    echo "$want" > "$ROOT/$part.sha256"
    echo "engine_device: unpacked $part in $(( $(date +%s) - T0 )) s"
done
# datasets carried beside the payload (scripts/engine_dataset_sp.py): into the model dir,
# every call (an unpacked model dir is replaced whole when model.tar.xz changes); a
# NAME.jsonl.xz (xz -9: ~1/20 of the carry) arrives as NAME.jsonl
# (`ls A B` fails when either glob is empty: test for any match, not for all)
if ls "$HERE"/datasets/ 2>/dev/null | grep -qE '\.jsonl(\.xz)?$'; then
    mkdir -p "$ROOT/model/datasets" || exit 3
    for f in "$HERE"/datasets/*.jsonl "$HERE"/datasets/*.jsonl.xz; do
        [ -f "$f" ] || continue
        name=$(basename "$f" .xz)
        if [ "$f" = "${f%.xz}" ]; then cp "$f" "$ROOT/model/datasets/$name.tmp"
        else xz -d -c "$f" > "$ROOT/model/datasets/$name.tmp"; fi \
            && mv "$ROOT/model/datasets/$name.tmp" "$ROOT/model/datasets/$name" \
            || { echo "engine_device: dataset $f failed"; exit 3; }
        echo "engine_device: dataset $name"
    done
fi
export PYTHONPATH="$ROOT/site" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_SERVER_DEV_MODE=1 PYTHONUNBUFFERED=1 \
    TRITON_CACHE_DIR="$CACHE/triton" VLLM_CACHE_ROOT="$CACHE/vllm" \
    TORCHINDUCTOR_CACHE_DIR="$CACHE/inductor" HF_HOME="$CACHE/hf" \
    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -c "import sys, torch, vllm; print('engine_device: python', sys.version.split()[0], 'torch', torch.__version__, 'vllm', vllm.__version__)" \
    || { echo "engine_device: import vllm failed"; exit 4; }
RUN="$ROOT/run_$(basename "$JOBS" .json)_$T0"
LEFT=$(( DEADLINE_S - ( $(date +%s) - T0 ) ))
echo "engine_device: runner deadline ${LEFT} s"
python3 -u "$HERE/engine_runner.py" --jobs "$HERE/$JOBS" --model "$ROOT/model" --out "$RUN" \
    --deadline-s "$LEFT" --pack "$OUT/engine_results.tar.xz"
rc=$?
echo "engine_device: done in $(( $(date +%s) - T0 )) s rc=$rc"
exit $rc
