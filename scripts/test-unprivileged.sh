#!/usr/bin/env bash
# Runs the integration tests as an unprivileged user (`nobody`), since root hides permission
# bugs. The integration test binary, the unilab binary and the fixtures are copied to a directory
# that user can read; the harness finds them through UNILAB_TEST_BIN, UNILAB_TEST_FIXTURES and
# UNILAB_TEST_MIGRATIONS. Run after `cargo test` has built everything. Skips, saying so, when
# not root (there is no one to switch to) or when `runuser` is missing. Arguments go to the test
# binary (a filter, say).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "test-unprivileged: not root, the tests already ran unprivileged; skipping"
    exit 0
fi
if ! command -v runuser >/dev/null; then
    echo "test-unprivileged: runuser is missing; skipping"
    exit 0
fi
user=${UNILAB_TEST_USER:-nobody}
work=$(mktemp -d /tmp/unilab-unprivileged.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/tests" "$work/home"
exe=$(cargo test --locked --test integration --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "integration":
        print(m["executable"])
')
if [ -z "$exe" ]; then
    echo "test-unprivileged: cargo built no integration test binary" >&2
    exit 1
fi
cp "$exe" "$work/bin/integration"
cp target/debug/unilab "$work/bin/"
cp -r tests/fixtures "$work/fixtures"
# insta keeps the snapshots of a module in `snapshots/` beside its file.
(cd tests && find . -type d -name snapshots -prune -exec cp -r --parents {} "$work/tests" \;)
cp -r migrations "$work/migrations"
cp scripts/example-trainer.py "$work/example-trainer.py"
mkdir "$work/python"
cp -r python/unilab "$work/python/unilab"
py_spy=()
if [ -n "${UNILAB_TEST_PY_SPY:-}" ]; then
    cp "$UNILAB_TEST_PY_SPY" "$work/bin/py-spy"
    py_spy=(UNILAB_TEST_PY_SPY="$work/bin/py-spy")
fi
fuse_lib=()
if [ -n "${UNILAB_TEST_FUSE_LIB:-}" ]; then
    cp -r "$UNILAB_TEST_FUSE_LIB" "$work/fuse-lib"
    fuse_lib=(UNILAB_TEST_FUSE_LIB="$work/fuse-lib")
fi
chmod -R a+rX "$work"
chown "$user" "$work/home"
# The tests run under this script's umask (002 under CI), set again after the switch: a PAM
# session (pam_umask) may have set its own.
mask=$(umask)
echo "test-unprivileged: integration as $user, umask $mask"
runuser -u "$user" -- env -i PATH="$PATH" HOME="$work/home" TMPDIR=/tmp CI=true \
    UNILAB_TEST_BIN="$work/bin/unilab" UNILAB_TEST_FIXTURES="$work/fixtures" \
    UNILAB_TEST_MIGRATIONS="$work/migrations" INSTA_WORKSPACE_ROOT="$work" \
    UNILAB_TEST_TRAINER="$work/example-trainer.py" UNILAB_TEST_PYTHON="$work/python" \
    "${py_spy[@]}" "${fuse_lib[@]}" \
    sh -c 'umask "$1" && shift && exec "$@"' sh "$mask" \
    "$work/bin/integration" --test-threads=2 "$@"
