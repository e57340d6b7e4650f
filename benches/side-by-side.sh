#!/usr/bin/env bash
# Two builds of unilab side by side on the same logs, run alternately (these machines are shared
# and noisy: compare the ratio within one run): `log verify` and `history --json` of the
# 1,000,000-event log, `soak export` and `soak show` of a 100,000-sample, 100-process soak.
# usage: benches/side-by-side.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]
# The logs are the benchmarks' own (built once by `cargo bench --bench event_log --
# open_read_last` and `cargo bench --bench soak -- export_memory`).
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1 after=$2 rounds=${3:-5}
data=$PWD/target/bench-data
for log in replay-1m soak-100k-100p-v4; do
    [ -e "$data/$log.complete" ] || { echo "missing $data/$log.redb: see the usage above" >&2; exit 2; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/unilab-sbs.XXXXXX")
trap 'rm -rf "$work"' EXIT
install_log() {
    mkdir -p "$work/$1/$(hostname)/$(id -u)"
    cp "$data/$2.redb" "$work/$1/$(hostname)/$(id -u)/events.redb"
    chmod -R go-w "$work/$1"
}
install_log events replay-1m
install_log soak soak-100k-100p-v4
python3 - "$before" "$after" "$rounds" "$work" <<'PY'
import statistics, subprocess, sys, time
before, after, rounds, work = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
cases = {
    "log verify (1M events)": ["--root", f"{work}/events", "log", "verify"],
    "history --json (1M events)": ["--root", f"{work}/events", "history", "--json"],
    "soak export (100k x 100 processes)": ["--root", f"{work}/soak", "soak", "export", "bench",
                                           "--output", f"{work}/out.json", "--force"],
    "soak show (100k samples)": ["--root", f"{work}/soak", "soak", "show", "bench"],
}
for name, args in cases.items():
    spent = {before: [], after: []}
    for r in range(rounds):
        for binary in (before, after) if r % 2 == 0 else (after, before):
            began = time.perf_counter()
            subprocess.run([binary] + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            spent[binary].append(time.perf_counter() - began)
    b, a = statistics.median(spent[before]), statistics.median(spent[after])
    print(f"{name:38s} before {b:7.3f} s  after {a:7.3f} s  after/before {a / b:5.2f}")
PY
