#!/usr/bin/env bash
# What the flight recorder costs, with real torch 2.15 (the venv of scripts/torch-e2e.sh),
# in one run on one machine, rounds interleaved:
#  1. a trainer's step time with FR on (`TORCH_FR_BUFFER_SIZE=2000`, what `soak run` sets)
#     against off (`0`): torchrun, Gloo, 4 ranks, STEPS steps of an all-reduce of 1024 floats
#     and a 256×256 matmul, the mean step of each rank after a warm-up;
#  2. what asking for the collectives adds to a capture: a job of 4 soaks (one a rank) hung as
#     the e2e test hangs it, with `unilab.watch_collectives()` against without, each rank's
#     capture timed from its start (`captured_at`) to its record in the log.
# ROUNDS (default 3), STEPS (default 400); UNILAB_TORCH_VENV as for scripts/torch-e2e.sh;
# UNILAB_BIN a unilab to use (default: this tree's, built in release).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${UNILAB_TORCH_VENV:-$PWD/target/torch-venv}
[ -x "$venv/bin/torchrun" ] || { echo "no torch venv at $venv: run scripts/torch-e2e.sh first"; exit 1; }
if [ -z "${UNILAB_BIN:-}" ]; then
    cargo build --release --locked --bin unilab >&2
fi
unilab=${UNILAB_BIN:-$PWD/target/release/unilab}
work=$(mktemp -d "${TMPDIR:-/tmp}/unilab-fr-cost.XXXXXX")
trap 'rm -rf "$work"' EXIT
export PATH="$venv/bin:$PATH" PYTHONPATH="$PWD/python"
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
rounds=${ROUNDS:-3}
steps=${STEPS:-400}

cat >"$work/steps.py" <<'PY'
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
steps, out = int(sys.argv[1]), sys.argv[2]
t, a = torch.ones(1024), torch.rand(256, 256)
warm = steps // 4
for i in range(steps):
    if i == warm:
        began = time.perf_counter()
    a = (a @ a).clamp_(-1, 1)
    dist.all_reduce(t)
mean = (time.perf_counter() - began) / (steps - warm)
with open(f"{out}.{dist.get_rank()}", "w") as f:
    f.write(str(mean))
dist.destroy_process_group()
PY

echo "== 1. step time, FR on against off ($rounds rounds of $steps steps, 4 ranks, Gloo)"
for round in $(seq "$rounds"); do
    for size in 2000 0; do
        TORCH_FR_BUFFER_SIZE=$size OMP_NUM_THREADS=1 torchrun --nproc-per-node 4 \
            --master-port "$(port)" "$work/steps.py" "$steps" "$work/step-$size-$round" \
            2>"$work/step-$size-$round.err" || { cat "$work/step-$size-$round.err"; exit 1; }
    done
done
python3 - "$work" "$rounds" <<'PY'
import glob, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
means = {}
for size in ("2000", "0"):
    values = [float(open(p).read()) for p in glob.glob(f"{work}/step-{size}-*.[0-9]")]
    means[size] = statistics.median(values)
    print(f"  TORCH_FR_BUFFER_SIZE={size:>4}: median step {means[size] * 1e3:.3f} ms over {len(values)} rank-runs")
print(f"  on / off: {means['2000'] / means['0']:.3f}")
PY

echo "== 2. the capture, with the collectives asked of each rank against without ($rounds rounds)"
for round in $(seq "$rounds"); do
    for mode in watch none; do
        root=$work/job-$mode-$round
        mkdir -p "$root/progress" && chmod 700 "$root" "$root/progress"
        flag=(); [ "$mode" = watch ] && flag=(--watch)
        timeout 120 torchrun --nproc-per-node 4 --master-port "$(port)" --no-python "$unilab" \
            --root "$root" --quiet soak run --job J --progress-dir "$root/progress" \
            --output "$root/soak-{rank}.json" --sample-interval 0.5 --stale-progress 10s \
            --py-spy off -- python tests/fixtures/torch_hang.py "$root/progress" "${flag[@]}" \
            >/dev/null 2>&1 || true
        "$unilab" --root "$root" history --json >"$root/history.jsonl"
    done
done
python3 - "$work" <<'PY'
import glob, json, statistics, sys
work = sys.argv[1]
for mode in ("watch", "none"):
    took = []
    for path in glob.glob(f"{work}/job-{mode}-*/history.jsonl"):
        for line in open(path):
            event = json.loads(line)
            if event["kind"] == "soak_evidence_captured":
                took.append(event["recorded_at"] - event["captured_at_us"] / 1e6)
    print(f"  {mode:>5}: a capture takes {statistics.median(took) * 1e3:.0f} ms (median of {len(took)}, max {max(took) * 1e3:.0f} ms)")
PY
