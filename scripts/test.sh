#!/usr/bin/env bash
# The test suite: the Rust tests (`cargo test --locked`, its arguments passed on), then the
# Python package's tests against the wheel built and installed as the README says.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked "$@"
scripts/test-python.sh
