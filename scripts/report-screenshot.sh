#!/usr/bin/env bash
# Renders a soak's report and takes screenshots of it in headless Chromium, as the tests do:
#   scripts/report-screenshot.sh ID [PNG]      a recorded soak (an id, its suffix, a prefix or
#                                              `latest`), from the state root unilab would use
#                                              (UNILAB_ROOT for another); PNG at 1400 px wide
#   scripts/report-screenshot.sh --example PNG  a soak of the example trainer that hangs in a
#                                              collective on two fake GPUs and fails on stale
#                                              progress, in a throw-away root: the README's
#                                              screenshot, docs/images/report-failed-soak.png
#   scripts/report-screenshot.sh --beats PNG    a soak of a trainer that beats its steps (a
#                                              checkpoint every 40, loss, tokens) on a fake GPU,
#                                              in a throw-away root: docs/images/heartbeat-*
# WIDTH sets the window's width (default 1400: docs/images' narrow ones are 700).
# Uses `unilab` from PATH (or UNILAB). Writes the page beside the PNG (default soak-ID.png) but
# for --example and --beats, whose page goes with their root.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
unilab=${UNILAB:-unilab}
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
    echo "report-screenshot: no chromium found (apt-get install chromium)" >&2
    exit 1
fi
root_args=()
if [ "${1:-}" = "--example" ]; then
    png=${2:?usage: scripts/report-screenshot.sh --example PNG}
    root=$(mktemp -d "${TMPDIR:-/tmp}/unilab-report.XXXXXX")
    trap 'rm -rf "$root"' EXIT
    mkdir -m 700 "$root/progress"
    root_args=(--root "$root/state")
    # Two GPUs the bundled fake nvidia-smi reports, the trainer's memory on the first.
    gpus="GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f|NVIDIA H200|143771|20000|37"
    gpus+=";GPU-2222bbbb-0000-4000-8000-000000000002|NVIDIA H200|143771|1000|5"
    PATH="$here/tests/fixtures:$PATH" FAKE_NVIDIA_SMI_GPUS="$gpus" \
        FAKE_NVIDIA_SMI_APPS_FILE="$root/apps" \
        "$unilab" "${root_args[@]}" soak run --progress-dir "$root/progress" --output "$root/soak.json" \
        --sample-interval 0.2 --stale-progress 3s --meta purpose=screenshot -- \
        python3 "$here/scripts/example-trainer.py" --progress-dir "$root/progress" --steps 80 \
        --step-seconds 0.1 --hang-after 40 --gpu-memory 3000 >/dev/null 2>&1 || true
    id=latest
elif [ "${1:-}" = "--beats" ]; then
    png=${2:?usage: scripts/report-screenshot.sh --beats PNG}
    root=$(mktemp -d "${TMPDIR:-/tmp}/unilab-report.XXXXXX")
    trap 'rm -rf "$root"' EXIT
    mkdir -m 700 "$root/progress"
    root_args=(--root "$root/state")
    PATH="$here/tests/fixtures:$PATH" \
        FAKE_NVIDIA_SMI_GPUS="GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f|NVIDIA H200|143771|20000|97" \
        "$unilab" "${root_args[@]}" soak run --progress-dir "$root/progress" --output "$root/soak.json" \
        --sample-interval 0.5 --step-timeout auto --meta purpose=screenshot -- \
        python3 "$here/tests/fixtures/phased_trainer.py" --steps 200 --step-seconds 0.08 \
        --checkpoint-every 40 --checkpoint-seconds 1.5 >/dev/null 2>&1 || true
    id=latest
else
    id=${1:?usage: scripts/report-screenshot.sh ID [PNG] | --example PNG}
    png=${2:-$PWD/soak-$id.png}
    [ -n "${UNILAB_ROOT:-}" ] && root_args=(--root "$UNILAB_ROOT")
fi
html="${root:-${png%.png}}/$(basename "${png%.png}").html"
[ -z "${root:-}" ] && html="${png%.png}.html"
"$unilab" "${root_args[@]}" soak report "$id" --output "$html" --force 2>&1 >/dev/null |
    { grep -v '^wrote the report' >&2 || true; }
profile=$(mktemp -d)
trap 'rm -rf "$profile" ${root:+"$root"}' EXIT
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="${WIDTH:-1400},1800" \
    --user-data-dir="$profile" --screenshot="$png" "file://$html" 2>/dev/null
[ -z "${root:-}" ] && echo "report: $html"
echo "screenshot: $png"
