"""`unilab.training.cuda_mps_cli` against the bundled fakes, through the installed binary."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from conftest import TWO_GPUS
from unilab.training import cuda_mps_cli as mps


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", TWO_GPUS)


def test_gpus_discovered_and_visible_under_the_mask(
    two_gpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    every = mps.discover_gpus()
    assert [g.uuid[:12] for g in every] == ["GPU-1111aaaa", "GPU-2222bbbb"]
    visible = mps.visible_gpus()
    assert visible == [mps.GpuIdentity(index=0, uuid=every[1].uuid)]
    assert visible[0].to_dict() == {"index": 0, "uuid": every[1].uuid}


def test_topology_and_host_status(two_gpus: None) -> None:
    plan = mps.resolve_topology("0,1")
    assert plan.topology_mode == "single_task_multi_gpu"
    assert len(plan.gpus) == 2
    assert mps.resolve_topology("each:0,1").topology_mode == "task_per_gpu"
    with pytest.raises(mps.CudaMpsError) as caught:
        mps.resolve_topology("7")
    assert caught.value.exit_code == 3
    status = mps.host_status()
    assert status.nvidia_smi_available
    assert len(status.gpus) == 2
    assert status.to_dict()["gpus"][1]["index"] == 1


def test_start_environment_stop(host: Path) -> None:
    record = mps.start_daemon("0", name="trainer")
    try:
        assert isinstance(record, mps.DaemonRecord)
        assert record.name == "trainer"
        assert record.pid > 0
        assert record.to_dict()["pipe_directory"] == str(record.pipe_directory)
        assert mps.list_daemon_records() == [record]
        assert mps.read_daemon_record(host) == record
        assert mps.read_daemon_record(host, "trainer") == record
        assert mps.daemon_process_is_live(record)
        assert mps.daemon_status(name="trainer")["state"] == "live"
        env = mps.environment_for_daemon(record)
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(record.pipe_directory)
        assert env["CUDA_VISIBLE_DEVICES"] == record.gpu_uuids[0]
        assert mps.environment_for_daemon("trainer") == env
        assert mps.select_environment_for_gpu(record.gpu_uuids[0]) == env
        assert mps.main(["list"]) == 0
    finally:
        stopped = mps.stop_daemon("trainer")
    assert stopped.name == "trainer" and stopped.pid == record.pid
    assert mps.list_daemon_records() == []
    assert not mps.daemon_process_is_live(record)


def test_a_stale_record_raises_stale_and_is_cleaned() -> None:
    record = mps.start_daemon("0", name="stale")
    assert record is not None
    # The test started this daemon: kill it as a crash would, then wait until it is gone.
    os.kill(record.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{record.pid}").exists() and time.monotonic() < deadline:
        state = Path(f"/proc/{record.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            break
        time.sleep(0.05)
    # Handing out its environment is refused, with what to do...
    with pytest.raises(mps.CudaMpsError) as refused:
        mps.environment_for_daemon("stale")
    assert refused.value.exit_code == 3 and "stop stale" in (refused.value.hint or "")
    # ... and stopping it finds it stale: its record is cleaned, nothing signalled.
    with pytest.raises(mps.StaleCudaMpsDaemonError) as caught:
        mps.stop_daemon("stale")
    assert isinstance(caught.value, mps.CudaMpsError)
    assert caught.value.exit_code == 4
    assert mps.list_daemon_records() == []


def test_a_multi_gpu_selector_is_refused(two_gpus: None) -> None:
    with pytest.raises(mps.CudaMpsError) as caught:
        mps.start_daemon("0,1")
    assert "single_task_multi_gpu" in str(caught.value) or "one GPU" in str(caught.value)
    assert caught.value.hint


def test_stop_all_daemons(two_gpus: None) -> None:
    mps.start_daemon("0", name="a")
    mps.start_daemon("1", name="b")
    stopped = mps.stop_all_daemons()
    assert sorted(r.name for r in stopped) == ["a", "b"]
    assert mps.list_daemon_records() == []


def fake_torch(uuids: list[str]) -> types.ModuleType:
    """A module that answers as torch does, seeing the GPUs ``uuids``."""
    torch = types.ModuleType("torch")
    torch.__version__ = "2.5.0+fake"  # type: ignore[attr-defined]

    class Props:
        def __init__(self, i: int) -> None:
            self.name = "NVIDIA H200"
            self.uuid = uuids[i][4:]

    torch.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        is_available=lambda: bool(uuids),
        device_count=lambda: len(uuids),
        get_device_properties=Props,
    )
    return torch


def test_doctor_checks_the_frameworks_view(two_gpus: None) -> None:
    every = [g.uuid for g in mps.discover_gpus()]
    report = mps.doctor("0", torch_module=fake_torch(every))
    framework = [c for c in report["checks"] if c["name"] == "framework"]
    assert framework and framework[0]["status"] == "ok", report
    # A framework that sees other GPUs than unilab does fails the check.
    report = mps.doctor("0", torch_module=fake_torch(every[1:]))
    framework = [c for c in report["checks"] if c["name"] == "framework"][0]
    assert framework["status"] != "ok"
    assert report["ok"] is False


def test_python_dash_m_runs_the_binary() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "unilab", "--version"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    assert done.stdout.startswith("unilab ")
