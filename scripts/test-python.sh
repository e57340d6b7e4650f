#!/usr/bin/env bash
# The Python package's tests, against the wheel as a user installs it: a venv (target/python-venv)
# with maturin and pytest from the package registry, the wheel built by the README's command
# (`maturin build --release`), installed there, and pytest run on tests/python from outside the
# source tree (UNILAB_TEST_INSTALLED=1 fails a test run that imported the source instead).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
venv=${UNILAB_PYTHON_VENV:-$repo/target/python-venv}
if [ ! -x "$venv/bin/maturin" ] || [ ! -x "$venv/bin/pytest" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q "maturin>=1.5,<2" pytest
fi
rm -f target/wheels/unilab-*.whl
"$venv/bin/maturin" build --release --locked --out target/wheels --quiet
"$venv/bin/pip" install -q --force-reinstall --no-deps target/wheels/unilab-*.whl
cd "$(mktemp -d)"
UNILAB_TEST_INSTALLED=1 "$venv/bin/pytest" -q -p no:cacheprovider "$repo/tests/python" "$@"
