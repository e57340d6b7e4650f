#!/usr/bin/env bash
# The quick start: build unilab, record a few events in a throw-away state root, replay them as
# a timeline and verify the log's hash chain. Needs no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin unilab --example append
root=$(mktemp -d "${TMPDIR:-/tmp}/unilab-quickstart.XXXXXX")
trap 'rm -rf "$root"' EXIT
unilab=target/release/unilab
target/release/examples/append "$root" 5
echo "--- unilab history"
"$unilab" --root "$root" history
echo "--- unilab history --json | head -n 1"
"$unilab" --root "$root" --json history | head -n 1
echo "--- unilab log verify"
"$unilab" --root "$root" log verify
