#!/usr/bin/env bash
# Renders a soak's report and takes a screenshot of it in headless Chromium, as the tests do:
#   scripts/report-screenshot.sh ID [PNG]        (ID: a soak id, a unique prefix or `latest`)
# Uses `unilab` from PATH (or UNILAB), and the state root unilab would use (or --root via
# UNILAB_ROOT). Writes soak-ID.html and PNG (default soak-ID.png) in the current directory.
set -euo pipefail
id=${1:?usage: scripts/report-screenshot.sh ID [PNG]}
unilab=${UNILAB:-unilab}
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
    echo "report-screenshot: no chromium found (apt-get install chromium)" >&2
    exit 1
fi
html="$PWD/soak-$id.html"
png=${2:-$PWD/soak-$id.png}
"$unilab" soak report "$id" --output "$html" --force
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1100,2400 \
    --user-data-dir="$profile" --screenshot="$png" "file://$html" 2>/dev/null
echo "report: $html"
echo "screenshot: $png"
