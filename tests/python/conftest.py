"""Fixtures for the Python package's tests: a state root per test, the bundled fakes
(nvidia-smi, nvidia-cuda-mps-control) first on PATH, and the example trainer.

Run them against the installed wheel, as CI does (`.ci/run`): from a venv where the wheel
built by `maturin build --release --zig --compatibility manylinux2014` was installed, `pytest
tests/python` (`scripts/test-python.sh` does all of it). With
UNILAB_TEST_INSTALLED=1 a test fails if `unilab` was imported from the source tree.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
TRAINER = REPO / "scripts" / "example-trainer.py"

TWO_GPUS = (
    "GPU-1111aaaa-0000-4000-8000-000000000001|NVIDIA H200|143771|20000|37;"
    "GPU-2222bbbb-0000-4000-8000-000000000002|NVIDIA H200|143771|1000|5"
)


@pytest.fixture(autouse=True)
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh state root (UNILAB_ROOT) and the fakes on PATH; the root returned."""
    root = tmp_path / "state"
    monkeypatch.setenv("UNILAB_ROOT", str(root))
    monkeypatch.setenv("PATH", f"{FIXTURES}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    # Pipe directories of this test's own (a daemon killed in a test leaves its socket there),
    # short: a UNIX socket path has at most 107 bytes.
    runtime = Path(tempfile.mkdtemp(prefix="ul-", dir="/tmp"))
    runtime.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("TMPDIR", "/tmp")
    yield root
    shutil.rmtree(runtime, ignore_errors=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    import unilab

    where = Path(unilab.__file__).resolve()
    if os.environ.get("UNILAB_TEST_INSTALLED") == "1" and REPO / "python" in where.parents:
        raise pytest.UsageError(f"unilab was imported from the source tree ({where}), not the wheel")
    print(f"unilab {unilab.__version__} from {where.parent}, binary {unilab.binary_path()}", file=sys.stderr)


@pytest.fixture
def progress(tmp_path: Path) -> Path:
    path = tmp_path / "progress"
    path.mkdir(mode=0o700)
    return path


def trainer(progress: Path, *args: str) -> list[str]:
    return [sys.executable, str(TRAINER), "--progress-dir", str(progress), *args]
