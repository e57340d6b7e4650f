#!/usr/bin/env bash
# `job show` of a job of 64 ranks × 1,000 and × 10,000 samples (benches/job_show.rs): this
# tree's unilab against BASE's (default `main`), in one run on one machine. BASE's unilab is
# built from `git archive BASE` into target/bench-base, its dependencies built once there.
# RUNS=N: runs of each fast case (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${BASE:-main}
src=$(mktemp -d "${TMPDIR:-/tmp}/unilab-base.XXXXXX")
trap 'rm -rf "$src"' EXIT
git archive "$base" | tar -x -C "$src"
echo "== BASE: $base ($(git rev-parse --short "$base"))" >&2
cargo build --release --locked --bin unilab --manifest-path "$src/Cargo.toml" \
    --target-dir "$PWD/target/bench-base" >&2
UNILAB_BENCH_BEFORE=$PWD/target/bench-base/release/unilab \
    cargo bench --locked --bench job_show
