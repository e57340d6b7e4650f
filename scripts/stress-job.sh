#!/usr/bin/env bash
# Runs the capture barrier's stress test N times in a row for each ring (default 5): four ranks
# of a ring all-reduce under one command line, all with the same limits, one rank hung; the
# ranks end when a peer's socket closes (Gloo's way) or wait on, each without and with py-spy
# (with it where there is one: UNILAB_TEST_PY_SPY or PATH), and a ring whose ranks beat. Every
# run must leave every rank with evidence of its ring process and its capture marked in the run
# before the first teardown, and `job show` must name the hung rank the suspect, first in its
# verdict; the test says how many runs of each held, and fails naming what went wrong in any
# that did not. Extra arguments go to `cargo test` (`--release`, say).
#
#   scripts/stress-job.sh [N] [cargo test arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
shift || true
case "$runs" in
    ''|*[!0-9]*|0)
        echo "stress-job: N must be a whole number above 0, not \`$runs\`" >&2
        exit 2
        ;;
esac
UNILAB_STRESS_RUNS=$runs exec cargo test --locked "$@" --test integration \
    job_barrier::stress_every_rank_is_captured_before_the_first_teardown \
    -- --ignored --nocapture --exact
