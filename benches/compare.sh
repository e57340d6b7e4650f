#!/usr/bin/env bash
# unilab's costs side by side with their floors and with other tools, in one run on one machine
# (ratios within this run are what to compare; these machines are shared and noisy):
#  1. read-only commands (`mps list`, `soak list`, `history --soak ID`) on a 1,000,000-event
#     log against exec'ing /bin/true;
#  2. syncs per sample of a soak sampled every 50 ms (group commit), counted with strace;
#  3. one sample of a 100-process tree against its floor (one read of each process's `stat`),
#     the GPUs read from nvidia-smi's loop mode against a process spawned a sample (the fake),
#     `soak export` streamed against the whole-object rendering (time and peak heap), and
#     `log verify` of 1,000,000 events, and `log archive` of a 100,000-sample soak (time, and the
#     log's size after compaction against before), and the bytes a process a sample costs the
#     log on disk, samples stored whole against packed;
#  4. the supervisor against psrecord on the same 100-process tree (benches/compare-psrecord.sh),
#     with the supervisor's own split of its time by part;
#  5. the supervisor's CPU a sample split by part, over 1 and 100 sleeping processes at 1 s and
#     0.1 s (benches/supervisor_cost.rs; SUPERVISOR_COST_BEFORE names a build to set beside it).
# Needs Python 3; strace for part 2 (skipped without it); pip for part 4 (SKIP_PSRECORD=1 skips).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-300}
cargo build --release --locked --bin unilab >&2
unilab=$PWD/target/release/unilab
work=$(mktemp -d "${TMPDIR:-/tmp}/unilab-compare.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== 1. read-only commands against /bin/true ($RUNS runs each, a 1,000,000-event log)"
# The benchmark's log (built once by the event_log benchmark), as this user's log on this host.
cargo bench --locked --bench event_log -- open_read_last >/dev/null 2>&1
root=$work/root
mkdir -p "$root/$(hostname)/$(id -u)"
chmod -R go-w "$root"
cp target/bench-data/replay-1m.redb "$root/$(hostname)/$(id -u)/events.redb"
python3 - "$RUNS" "$unilab" "$root" <<'PY'
import os, subprocess, sys, time
runs, unilab, root = int(sys.argv[1]), sys.argv[2], sys.argv[3]
commands = {
    "/bin/true": ["/bin/true"],
    "unilab --version": [unilab, "--version"],
    "unilab mps list": [unilab, "--root", root, "mps", "list"],
    "unilab soak list": [unilab, "--root", root, "soak", "list"],
    "unilab history --soak ID": [unilab, "--root", root, "history", "--soak", "20200101T000000-none"],
}
spent = {name: 0.0 for name in commands}
for _ in range(runs):  # interleaved, so that noise falls on all alike
    for name, argv in commands.items():
        began = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        spent[name] += time.perf_counter() - began
floor = spent["/bin/true"] / runs
for name in commands:
    mean = spent[name] / runs
    print(f"  {name:28} {mean * 1e3:6.2f} ms  {mean / floor:4.2f}x /bin/true")
PY

echo "== 2. syncs per sample at a 50 ms interval"
if command -v strace >/dev/null; then
    # Two soaks, 2 s and 20 s: what the longer adds is the cost of its extra samples alone (the
    # start, the verdict and the artifact cost the same in both). Long enough that where the last
    # group of a run falls (a commit more or less) moves the figure by under 0.01.
    for steps in 20 200; do
        rm -rf "$work/progress" "$work/root2"
        mkdir -m 700 "$work/progress"
        strace -f -c -e trace=fsync,fdatasync,sync_file_range -o "$work/strace-$steps.txt" \
            "$unilab" --root "$work/root2" soak run --progress-dir "$work/progress" \
            --output "$work/soak-$steps.json" --sample-interval 50ms --stale-progress 30s \
            -- python3 scripts/example-trainer.py --progress-dir "$work/progress" \
            --steps "$steps" --step-seconds 0.1 >/dev/null 2>&1
    done
    python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def run(steps):
    samples = json.load(open(f"{work}/soak-{steps}.json"))["summary"]["samples"]
    syncs = sum(int(l.split()[3]) for l in open(f"{work}/strace-{steps}.txt")
                if l.split() and l.split()[-1] in ("fsync", "fdatasync", "sync_file_range"))
    return samples, syncs
(short_samples, short_syncs), (long_samples, long_syncs) = run(20), run(200)
for samples, syncs in ((short_samples, short_syncs), (long_samples, long_syncs)):
    print(f"  {syncs} syncs for {samples} samples (start, verdict and artifact included)")
extra = (long_syncs - short_syncs) / (long_samples - short_samples)
print(f"  each further sample: {extra:.3f} syncs (one durable commit of the second's samples)")
PY
else
    echo "  skipped: no strace"
fi

echo "== 3. sampler, GPUs, export, verify (criterion and one-shot figures)"
cargo bench --locked --bench soak -- sampler/ 2>/dev/null \
    | grep -E '^(sampler/|gpu_sampling|export_memory)|time:' | sed 's/^/  /'
cargo bench --locked --bench soak -- export_100k 2>/dev/null \
    | grep -E '^export_100k|time:' | sed 's/^/  /'
cargo bench --locked --bench event_log -- verify 2>/dev/null \
    | grep -E 'verify_1m|thrpt:' | sed 's/^/  /'
# `log archive` of a 100,000-sample soak: its time (target < 2 s) and the live log's size on
# disk after archive and compaction against before (target < 5 %).
cargo bench --locked --bench archive 2>/dev/null | grep -E '^archive_100k' | sed 's/^/  /'
# What a sample costs the log per process on a 100-process tree, in disk blocks used, stored
# whole (schema 7) against packed (schema 8), and the append's time (target <= 16 bytes).
cargo bench --locked --bench log_size 2>/dev/null | grep -E '^log_size' | sed 's/^/  /'

if [ "${SKIP_PSRECORD:-}" != 1 ]; then
    echo "== 4. the supervisor against psrecord"
    DURATION=${DURATION:-30} benches/compare-psrecord.sh
fi

echo "== 5. the supervisor's CPU a sample, by part"
SUPERVISOR_COST_SECONDS=${SUPERVISOR_COST_SECONDS:-20} cargo bench --locked --bench supervisor_cost 2>/dev/null \
    | sed 's/^/  /'
