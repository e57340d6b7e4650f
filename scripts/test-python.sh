#!/usr/bin/env bash
# The Python package's tests, against the wheel as a user installs it: a venv (target/python-venv)
# with maturin, ziglang and pytest from the package registry, the wheel built by the README's
# command (`maturin build --release --zig --compatibility manylinux2014`: linked by zig against
# glibc 2.17's symbols, so it installs on RHEL/Rocky 8 and Ubuntu 20.04, not only on hosts as
# new as this one), installed there, and pytest run on tests/python from outside the source tree
# (UNILAB_TEST_INSTALLED=1 fails a test run that imported the source instead). test_wheel.py
# checks the installed wheel's tag and runs `objdump -T` over its binary: no GLIBC_ symbol
# version above 2.17.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
venv=${UNILAB_PYTHON_VENV:-$repo/target/python-venv}
if [ ! -x "$venv/bin/maturin" ] || [ ! -x "$venv/bin/pytest" ] \
    || ! "$venv/bin/python" -c 'import ziglang' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    # ziglang: the version the wheel was last built and checked with (a zig release can change
    # what cargo-zigbuild, inside maturin, relies on).
    "$venv/bin/pip" install -q "maturin>=1.5,<2" "ziglang>=0.17,<0.18" pytest
fi
rm -f target/wheels/unilab-*.whl
# maturin runs zig as `python3 -m ziglang`: the venv's python first on PATH.
PATH="$venv/bin:$PATH" "$venv/bin/maturin" build --release --locked \
    --zig --compatibility manylinux2014 --out target/wheels --quiet
wheel=$(echo target/wheels/unilab-*.whl)
case "$wheel" in
    *manylinux_2_17_*.whl) ;;
    *) echo "test-python: $wheel is not a manylinux2014 (glibc 2.17) wheel" >&2; exit 1 ;;
esac
"$venv/bin/pip" install -q --force-reinstall --no-deps "$wheel"
cd "$(mktemp -d)"
UNILAB_TEST_INSTALLED=1 "$venv/bin/pytest" -q -p no:cacheprovider "$repo/tests/python" "$@"
# The wheel: `maturin build --release --zig ...` puts the `unilab` binary (bindings = "bin")
# and the pure-Python package in python/unilab beside it. `pip install target/wheels/unilab-*.whl`
# then gives `unilab` on PATH and `import unilab` — no Rust toolchain needed to install it.
