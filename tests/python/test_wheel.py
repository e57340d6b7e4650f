"""The installed wheel runs on the clusters users have: tagged manylinux2014 (glibc 2.17, RHEL/Rocky
7 and 8, Ubuntu 20.04 and older), its binary asking the C library for nothing newer than
GLIBC_2.17 (`objdump -T`), and shipped without debug info or a symbol table.

These read the distribution pip installed (its WHEEL file and the binary its RECORD lists), so
they test what `scripts/test-python.sh` built with `maturin build --zig --compatibility
manylinux2014`, not a binary from the source tree.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Optional

import pytest

import unilab

# The oldest glibc the wheel promises: manylinux2014 is manylinux_2_17.
GLIBC_FLOOR = (2, 17)


def installed() -> metadata.Distribution:
    dist: Optional[metadata.Distribution]
    try:
        dist = metadata.distribution("unilab")
    except metadata.PackageNotFoundError:
        dist = None
    editable = dist is not None and '"editable": true' in (dist.read_text("direct_url.json") or "")
    if dist is None or editable or dist.read_text("WHEEL") is None:
        if os.environ.get("UNILAB_TEST_INSTALLED") == "1":
            pytest.fail("no installed wheel of unilab (scripts/test-python.sh installs one)")
        pytest.skip("unilab is not installed from a wheel here (scripts/test-python.sh does that)")
    return dist


def wheel_binary(dist: metadata.Distribution) -> Path:
    """The `unilab` executable the wheel installed (from its RECORD: `../../bin/unilab`)."""
    found = [f for f in dist.files or () if f.name == "unilab" and f.parent.name == "bin"]
    assert len(found) == 1, f"the wheel's RECORD lists {len(found)} unilab binaries: {found}"
    return Path(dist.locate_file(found[0])).resolve()


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not on PATH: install binutils (it comes with a C toolchain)")
    return path


def glibc_versions(objdump_t: str) -> list[tuple[int, ...]]:
    """Every GLIBC_x.y[.z] symbol version in `objdump -T` output, as tuples."""
    found = re.findall(r"\bGLIBC_([0-9.]+[0-9])\b", objdump_t)
    return sorted({tuple(int(part) for part in version.split(".")) for version in found})


def newest(versions: list[tuple[int, ...]]) -> Optional[str]:
    return "GLIBC_" + ".".join(map(str, versions[-1])) if versions else None


def test_the_wheel_is_tagged_manylinux2014() -> None:
    wheel = installed().read_text("WHEEL") or ""
    tags = {line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")}
    arch = platform.machine()
    assert f"py3-none-manylinux2014_{arch}" in tags, wheel
    assert f"py3-none-manylinux_2_17_{arch}" in tags, wheel
    newer = [t for t in tags if (m := re.search(r"manylinux_2_(\d+)_", t)) and int(m.group(1)) > 17]
    assert not newer, f"the wheel also claims a newer glibc: {newer}"


def test_the_binary_needs_no_glibc_symbol_newer_than_2_17() -> None:
    binary = wheel_binary(installed())
    assert os.path.samefile(binary, unilab.binary_path()), (binary, unilab.binary_path())
    dump = subprocess.run(
        [tool("objdump"), "-T", str(binary)], capture_output=True, text=True, check=True
    ).stdout
    versions = glibc_versions(dump)
    # A binary with no versioned glibc symbol at all was not read right (or is static): say so.
    assert versions, f"objdump -T {binary} lists no GLIBC_ symbol version"
    too_new = [
        line.strip()
        for line in dump.splitlines()
        if any(v > GLIBC_FLOOR for v in glibc_versions(line))
    ]
    assert not too_new, (
        f"{binary} needs glibc newer than 2.17 (newest {newest(versions)}), so the wheel will "
        f"not run where its manylinux2014 tag says it does; build it with `maturin build "
        f"--release --zig --compatibility manylinux2014`. Symbols:\n" + "\n".join(too_new)
    )


def test_the_binary_carries_no_debug_info_or_symbol_table() -> None:
    binary = wheel_binary(installed())
    sections = subprocess.run(
        [tool("readelf"), "-S", "-W", str(binary)], capture_output=True, text=True, check=True
    ).stdout
    names = set(re.findall(r"\[\s*\d+\]\s+(\.\S+)", sections))
    assert ".text" in names, sections
    extra = sorted(n for n in names if n.startswith((".debug_info", ".debug_line", ".symtab")))
    assert not extra, f"{binary} is not stripped: {extra} (pyproject.toml's [tool.maturin] strip)"


def test_the_glibc_version_reader_finds_the_newest() -> None:
    dump = (
        "0000000000000000      DF *UND*\t0000000000000000 (GLIBC_2.2.5) malloc\n"
        "0000000000000000      DF *UND*\t0000000000000000 (GLIBC_2.17) clock_gettime\n"
        "0000000000000000      DF *UND*\t0000000000000000 (GLIBC_2.34) __libc_start_main\n"
        "0000000000000000  w   D  *UND*\t0000000000000000              statx\n"
    )
    versions = glibc_versions(dump)
    assert versions == [(2, 2, 5), (2, 17), (2, 34)]
    assert newest(versions) == "GLIBC_2.34"
    assert (2, 34) > GLIBC_FLOOR and (2, 2, 5) < GLIBC_FLOOR
