#!/usr/bin/env bash
# The flight recorder end to end with real PyTorch (issue 49): torch 2.15.0 from the Python
# registry in a venv of its own (about 5 GB with the CUDA libraries it brings), then torchrun
# with Gloo, 4 ranks on this machine, rank 2 asleep before all-reduce 8
# (tests/fixtures/torch_hang.py), in both layouts:
#   1. one soak per rank (`torchrun --no-python unilab soak run --job J ...`), with
#      `unilab.watch_collectives()`: `job show J` must name rank 2 by the collective;
#   2. the same without the watcher: the verdict still names rank 2 (its stack) and says why
#      no collectives were read, as each rank's evidence does;
#   3. one soak over torchrun holding the 4 ranks: `soak show` names rank 2 by the collective.
# Needs 10 GB free and network access to the registry; without them it says so and exits 0
# (CI gives it 10 minutes, the install 7 of them). UNILAB_TORCH_VENV picks the venv (default
# target/torch-venv); UNILAB_TORCH_E2E=skip skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${UNILAB_TORCH_E2E:-}" = skip ]; then
    echo "torch-e2e: skipped (UNILAB_TORCH_E2E=skip)"; exit 0
fi
venv=${UNILAB_TORCH_VENV:-$PWD/target/torch-venv}
if [ ! -x "$venv/bin/torchrun" ]; then
    free_kb=$(df -Pk "$(dirname "$venv")" | awk 'NR==2 {print $4}')
    if [ "$free_kb" -lt $((10 * 1024 * 1024)) ]; then
        echo "torch-e2e: NOT RUN: it needs 10 GB free for torch 2.15.0, $((free_kb / 1024)) MB free"
        exit 0
    fi
    python3 -m venv "$venv"
    if ! timeout 420 "$venv/bin/pip" install -q torch==2.15.0 numpy; then
        echo "torch-e2e: NOT RUN: torch==2.15.0 could not be installed from the registry"
        exit 0
    fi
fi
unilab=${UNILAB_BIN:-$PWD/target/debug/unilab}
[ -x "$unilab" ] || cargo build --locked --bin unilab
work=$(mktemp -d "${TMPDIR:-/tmp}/unilab-torch-e2e.XXXXXX")
trap 'rm -rf "$work"' EXIT
export PATH="$venv/bin:$PATH" PYTHONPATH="$PWD/python"
trainer=$PWD/tests/fixtures/torch_hang.py
fail() { echo "torch-e2e: FAILED: $*"; exit 1; }
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

per_rank() {  # $1: a name, $2...: the trainer's flags
    local name=$1; shift
    local root=$work/$name
    mkdir -p "$root/progress" && chmod 700 "$root" "$root/progress"
    timeout 120 torchrun --nproc-per-node 4 --master-port "$(port)" --no-python "$unilab" --root "$root" \
        --quiet soak run --job J --progress-dir "$root/progress" --output "$root/soak-{rank}.json" \
        --sample-interval 0.5 --stale-progress 15s --py-spy off \
        -- python "$trainer" "$root/progress" "$@" >"$root/out" 2>&1 || true
    "$unilab" --root "$root" --json job show J >"$root/job.json" || fail "$name: job show"
}

per_rank watched --watch
python3 - "$work/watched/job.json" <<'PY' || fail "the watched ranks: $(cat "$work/watched/job.json")"
import json, sys
view = json.load(open(sys.argv[1]))
c = view["collective"]
assert c["missing_ranks"] == [2] and c["waiting_ranks"] == [0, 1, 3], c
assert c["op"] == "gloo:all_reduce" and c["seq"] == 8, c
assert view["suspect"]["rank"] == 2 and view["suspect"]["why"] == "collective", view["suspect"]
print("torch-e2e: one soak per rank, watched:", view["verdict"])
PY

per_rank unwatched
python3 - "$work/unwatched/job.json" "$work/unwatched" <<'PY' || fail "the unwatched ranks: $(cat "$work/unwatched/job.json")"
import json, sys, glob
view = json.load(open(sys.argv[1]))
assert view["collective"] is None, view["collective"]
assert view["suspect"]["rank"] == 2, view["suspect"]
assert "no collectives were read of ranks 0, 1, 2, 3: " in view["verdict"], view["verdict"]
for path in glob.glob(sys.argv[2] + "/soak-*.json"):
    artifact = json.load(open(path))
    said = [p["collectives"]["missing"] for p in artifact["evidence"]["processes"] if p.get("collectives")]
    assert said and "watch_collectives" in said[0][0], (path, said)
print("torch-e2e: one soak per rank, not watched:", view["verdict"])
PY

root=$work/tree
mkdir -p "$root/progress" && chmod 700 "$root" "$root/progress"
timeout 120 "$unilab" --root "$root" --quiet soak run --progress-dir "$root/progress" \
    --output "$root/soak.json" --sample-interval 0.5 --stale-progress 15s --py-spy off \
    -- torchrun --nproc-per-node 4 --master-port "$(port)" "$trainer" "$root/progress" --watch \
    >"$root/out" 2>&1 || true
python3 - "$root/soak.json" <<'PY' || fail "one soak over torchrun: $(head -c 2000 "$root/soak.json")"
import json, sys
evidence = json.load(open(sys.argv[1]))["evidence"]
c = evidence["collective"]
assert c["missing_ranks"] == [2] and c["waiting_ranks"] == [0, 1, 3], c
print("torch-e2e: one soak over torchrun: rank 2 never entered", c["op"], "#%d" % c["seq"])
PY
"$unilab" --root "$root" soak show "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["soak_id"])' "$root/soak.json")" | grep -q "rank 2 (its last completed is #7) never entered" \
    || fail "soak show does not name rank 2"
echo "torch-e2e: passed"
