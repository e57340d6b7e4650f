#!/usr/bin/env bash
# The quick start: build unilab and soak the bundled example trainer under it, in a throw-away
# state root. Needs no GPU (without nvidia-smi the samples record that GPUs could not be read).
# Then shows the soak list, the soak's history, verifies the log and checks that the artifact
# regenerates byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin unilab
root=$(mktemp -d "${TMPDIR:-/tmp}/unilab-quickstart.XXXXXX")
trap 'rm -rf "$root"' EXIT
mkdir -m 700 "$root/progress"
# What the soak leaves for you to open stays: the artifact and its HTML report.
kept=$(mktemp -d "${TMPDIR:-/tmp}/unilab-quickstart-result.XXXXXX")
unilab() { target/release/unilab --root "$root" "$@"; }

echo "--- unilab soak run (the example trainer, 5 s, sampled every 0.5 s)"
unilab soak run --progress-dir "$root/progress" --output "$kept/soak.json" \
    --report "$kept/soak.html" --sample-interval 0.5 --stale-progress 10s --meta purpose=quickstart \
    -- python3 scripts/example-trainer.py --progress-dir "$root/progress" --steps 20
id=$(unilab --json soak list | python3 -c 'import json, sys; print(json.load(sys.stdin)[-1]["soak_id"])')
echo "--- unilab soak list"
unilab soak list
echo "--- unilab history --soak $id | tail -n 3"
unilab history --soak "$id" | tail -n 3
echo "--- unilab log verify"
unilab log verify
echo "--- unilab soak export $id | cmp - soak.json"
unilab soak export "$id" | cmp - "$kept/soak.json" && echo "the artifact regenerates byte for byte"
echo "--- kept: the artifact $kept/soak.json and its report $kept/soak.html (open it in a browser)"
