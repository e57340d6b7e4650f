#!/usr/bin/env bash
# A real-GPU check of unilab's MPS path: start a daemon, run a CUDA client (PyTorch matrix
# products) under its environment, check that nvidia-smi lists nvidia-cuda-mps-server while the
# client runs, stop the daemon, check it is gone. Prints a pass/fail table; exits 1 if any step
# failed. Needs an NVIDIA GPU, the driver's nvidia-smi and nvidia-cuda-mps-control, and Python 3
# with torch.
#
#   scripts/gpu-check.sh [path/to/unilab]     (default: builds target/release/unilab)
set -uo pipefail
cd "$(dirname "$0")/.."
unilab=${1:-}
if [ -z "$unilab" ]; then
    cargo build --release --locked --bin unilab >&2 || exit 1
    unilab=target/release/unilab
fi
root=$(mktemp -d "${TMPDIR:-/tmp}/unilab-gpu-check.XXXXXX")
results=()
failed=0
step() { # name, status, detail
    results+=("$(printf '%-28s %-5s %s' "$1" "$2" "$3")")
    [ "$2" = pass ] || failed=1
}
u() { "$unilab" --root "$root" "$@"; }

if u mps doctor 0 >"$root/doctor.txt" 2>&1; then step "mps doctor 0" pass ""; else step "mps doctor 0" fail "$(grep FAIL "$root/doctor.txt" | head -1)"; fi
if u --json mps start 0 >"$root/start.json" 2>"$root/start.err"; then
    pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$root/start.json")
    step "mps start 0" pass "daemon pid $pid"
else
    step "mps start 0" fail "$(head -1 "$root/start.err")"
    pid=""
fi

cat >"$root/client.py" <<'PY'
import time, torch
assert torch.cuda.is_available(), "CUDA is not available to the client"
a = torch.randn(4096, 4096, device="cuda")
b = torch.randn(4096, 4096, device="cuda")
deadline = time.time() + 8
n = 0
while time.time() < deadline:
    c = a @ b
    n += 1
torch.cuda.synchronize()
print(f"ok: {n} matmuls of 4096x4096 on {torch.cuda.get_device_name(0)}, checksum {float(c.sum()):.3e}")
PY
if [ -n "$pid" ]; then
    u mps exec -- python3 "$root/client.py" >"$root/client.out" 2>&1 &
    client=$!
    seen=""
    for _ in $(seq 1 30); do
        sleep 0.25
        if nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader 2>/dev/null | grep -q nvidia-cuda-mps-server; then
            seen=yes
            break
        fi
    done
    if wait "$client"; then step "CUDA client under MPS" pass "$(tail -1 "$root/client.out")"; else step "CUDA client under MPS" fail "$(tail -1 "$root/client.out")"; fi
    if [ -n "$seen" ]; then step "nvidia-cuda-mps-server listed" pass "by nvidia-smi --query-compute-apps"; else step "nvidia-cuda-mps-server listed" fail "not seen in nvidia-smi while the client ran"; fi
    if u mps stop >"$root/stop.out" 2>&1; then step "mps stop" pass "$(head -1 "$root/stop.out")"; else step "mps stop" fail "$(head -1 "$root/stop.out")"; fi
    sleep 0.5
    if [ -e "/proc/$pid" ] && ! grep -q ') Z ' "/proc/$pid/stat" 2>/dev/null; then step "daemon gone" fail "pid $pid still runs"; else step "daemon gone" pass "pid $pid"; fi
    kinds=$(u --json history --daemon "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["name"])' "$root/start.json")" | python3 -c 'import json,sys; print(" ".join(json.loads(l)["kind"] for l in sys.stdin))')
    case "$kinds" in
        "topology_resolved daemon_started daemon_verified_live daemon_stopped") step "history lifecycle" pass "$kinds" ;;
        *) step "history lifecycle" fail "$kinds" ;;
    esac
fi
if u log verify >"$root/verify.out" 2>&1; then step "log verify" pass ""; else step "log verify" fail "$(head -1 "$root/verify.out")"; fi

printf '%-28s %-5s %s\n' STEP RESULT DETAIL
printf '%s\n' "${results[@]}"
rm -rf "$root"
exit $failed
