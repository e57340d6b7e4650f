#!/usr/bin/env bash
# Side by side, in one run, on the same machine:
#  1. unilab's soak supervisor (with its guard) and psrecord (`--include-children`) watching the
#     same 100-process tree at a 1 s interval for DURATION seconds (default 60): each watcher's
#     CPU time over wall time, and what each records;
#  2. unilab's resident memory after about 1,000 and 10,000 samples (a soak sampled every 10 ms).
# Needs Python 3 and pip (psrecord and psutil are installed from PyPI). No GPU is needed; without
# nvidia-smi the samples record that GPUs could not be read. ONLY_MEMORY=1 runs part 2 alone,
# SKIP_MEMORY=1 part 1 alone.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-60}
LONG_SAMPLES=${LONG_SAMPLES:-10000}
python3 -m pip install -q psrecord psutil >&2
cargo build --release --locked --bin unilab >&2
unilab=$PWD/target/release/unilab
work=$(mktemp -d "${TMPDIR:-/tmp}/unilab-compare.XXXXXX")
# What this script started, stopped by pid (never by name): a supervisor stops its own tree.
started=()
cleanup() {
    for pid in "${started[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
    for pid in "${started[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
tck=$(getconf CLK_TCK)

# CPU ticks (utime + stime) of a pid, or nothing once it is gone.
ticks() { [ -n "$1" ] && awk '{ split($0, a, ") "); split(a[2], f, " "); print f[12] + f[13] }' "/proc/$1/stat" 2>/dev/null || true; }
now() { date +%s.%N; }

if [ "${ONLY_MEMORY:-}" != 1 ]; then
echo "== 1. unilab vs psrecord: a 100-process tree, 1 s interval, ${DURATION} s"
mkdir -m 700 "$work/progress"
start=$(now)
UNILAB_COST_SPLIT="$work/split.json" \
"$unilab" --root "$work/root" soak run --progress-dir "$work/progress" --output "$work/soak.json" \
    --sample-interval 1 --stale-progress 30s --shutdown-grace 2s \
    -- python3 scripts/example-trainer.py --progress-dir "$work/progress" \
       --steps $((DURATION * 4)) --step-seconds 0.25 --children 99 >/dev/null &
supervisor=$!
started+=("$supervisor")
trainer=""
for _ in $(seq 1 100); do
    trainer=$(pgrep -o -f "example-trainer.py --progress-dir $work/progress" || true)
    [ -n "$trainer" ] && break
    sleep 0.1
done
guard=$(pgrep -P "$supervisor" -f __soak-guard || true)
psrecord "$trainer" --include-children --interval 1 --duration "$DURATION" --log "$work/psrecord.txt" >/dev/null 2>&1 &
psr=$!
started+=("$psr")
psr_start=$(now)
sup_ticks=0; guard_ticks=0; psr_ticks=0; psr_end=""
while kill -0 "$supervisor" 2>/dev/null; do
    [ -n "$guard" ] || guard=$(pgrep -P "$supervisor" -f __soak-guard || true)
    t=$(ticks "$supervisor"); [ -n "$t" ] && sup_ticks=$t
    t=$(ticks "$guard"); [ -n "$t" ] && guard_ticks=$t
    if kill -0 "$psr" 2>/dev/null; then
        t=$(ticks "$psr"); [ -n "$t" ] && psr_ticks=$t
    elif [ -z "$psr_end" ]; then psr_end=$(now); fi
    sleep 0.2
done
end=$(now)
wait "$supervisor" || true
wait "$psr" 2>/dev/null || true
[ -n "$psr_end" ] || psr_end=$(now)
python3 - "$work" "$sup_ticks" "$guard_ticks" "$psr_ticks" "$tck" "$start" "$end" "$psr_start" "$psr_end" <<'PY'
import json, sys
work, sup, guard, psr, tck, start, end, pstart, pend = sys.argv[1:]
sup, guard, psr, tck = int(sup), int(guard), int(psr), int(tck)
wall, pwall = float(end) - float(start), float(pend) - float(pstart)
art = json.load(open(f"{work}/soak.json"))
rows = [l for l in open(f"{work}/psrecord.txt") if l.strip() and not l.startswith("#")]
unilab_cpu = (sup + guard) / tck
print(f"unilab:   {unilab_cpu:.2f} s CPU over {wall:.1f} s wall = {100 * unilab_cpu / wall:.2f}% of one core "
      f"(supervisor {sup / tck:.2f} s, guard {guard / tck:.2f} s); {len(art['samples'])} samples of "
      f"{art['summary']['peak_processes']} processes each: per process pid, ppid, start time, name, state, RSS, CPU, "
      f"threads, fds, I/O; GPUs; progress; sampler cost {art['summary']['sampler_cost_us_mean']} us mean; verdict {art['outcome']['status']}")
print(f"psrecord: {psr / tck:.2f} s CPU over {pwall:.1f} s wall = {100 * psr / tck / pwall:.2f}% of one core; "
      f"{len(rows)} rows of tree-total CPU % and RSS")
print(f"ratio: psrecord used {psr / max(sup + guard, 1):.1f}x the CPU of unilab; "
      f"unilab used {(sup + guard) / max(psr, 1):.2f}x psrecord's (target <= 0.1)")
# Where the supervisor's time went, from its own accounting (UNILAB_COST_SPLIT): the loop's
# parts a sample, on its main thread, then the rest of the process.
split = json.load(open(f"{work}/split.json"))
n = max(split["samples"], 1)
parts = split["parts_ns"]
print(f"split of the supervisor's {split['samples']} samples (us a sample; main thread, by part):")
for name, ns in sorted(parts.items(), key=lambda kv: -kv[1]):
    print(f"  {name:14} {ns / 1e3 / n:8.1f}")
other = split["loop_ns"] - sum(parts.values())
threads = sum(t["ns"] for t in split["threads"])
print(f"  {'loop other':14} {other / 1e3 / n:8.1f}")
print(f"  {'the loop':14} {split['loop_ns'] / 1e3 / n:8.1f}; other threads alive at the end "
      f"{threads / 1e3 / n:.1f}; the process in all {split['process_ns'] / 1e3 / n:.1f}")
PY

fi

[ "${SKIP_MEMORY:-}" = 1 ] && exit 0
echo "== 2. unilab's resident memory as samples accumulate (every 10 ms)"
rm -rf "$work/progress2"; mkdir -m 700 "$work/progress2"
"$unilab" --root "$work/root2" soak run --progress-dir "$work/progress2" --output "$work/soak2.json" \
    --sample-interval 10ms --stale-progress 60s --shutdown-grace 1s \
    -- python3 scripts/example-trainer.py --progress-dir "$work/progress2" \
       --steps 100000 --step-seconds 0.25 >/dev/null &
supervisor=$!
started+=("$supervisor")
samples() { "$unilab" --root "$work/root2" --json soak list 2>/dev/null | python3 -c 'import json,sys; l=json.load(sys.stdin); print(l[0]["samples"] if l else 0)'; }
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
report_at() {
    local n=0
    while [ "$n" -lt "$1" ]; do
        sleep 0.5
        n=$(samples || true)
        n=${n:-0}
    done
    echo "after $n samples: supervisor VmRSS $(rss "$supervisor") kB"
}
report_at 1000
report_at "$LONG_SAMPLES"
kill -INT "$supervisor"
wait "$supervisor" || true
