"""`unilab.watch_collectives()`: the FIFO protocol end to end, against a real trainer process
(the fake torch of tests/fixtures/fake-torch standing in for `torch.distributed`) whose main
thread is blocked, as a rank stuck in a collective is."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, Optional

import pytest

import unilab
from conftest import FIXTURES

FAKE_TORCH = FIXTURES / "fake-torch"
UNILAB_PARENT = Path(unilab.__file__).resolve().parent.parent
# Generous: the machine may be slow; the watcher answers in well under a second.
PATIENCE = 60.0

# A trainer: watches, says whether it does, then blocks its main thread in a function whose
# name the stacks must show.
TRAINER = """
import sys, threading, unilab
print("watching" if unilab.watch_collectives() else "not watching", flush=True)
print("again" if unilab.watch_collectives() else "not again", flush=True)
def blocked_in_all_reduce():
    threading.Event().wait()
if sys.argv[1:] == ["block"]:
    blocked_in_all_reduce()
"""


def start(env: Dict[str, str], *args: str) -> subprocess.Popen:
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join([str(FAKE_TORCH), str(UNILAB_PARENT)])
    full.update(env)
    return subprocess.Popen(
        [sys.executable, "-c", TRAINER, *args], env=full, stdout=subprocess.PIPE, text=True
    )


def first_line(proc: subprocess.Popen) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def wait_for(path: Path, newer_than: Optional[float] = None) -> None:
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        if path.exists() and (newer_than is None or path.stat().st_mtime_ns > newer_than):
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} was not written")


def ask(fifo: Path) -> None:
    """What unilab does: open the FIFO without blocking (ENXIO: no reader yet), write, close."""
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as e:
            if e.errno not in (errno.ENXIO, errno.ENOENT) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    os.write(fd, b"dump\n")
    os.close(fd)


@pytest.fixture
def asked(tmp_path: Path) -> Path:
    d = tmp_path / "fr"
    d.mkdir(mode=0o700)
    return d


@pytest.fixture
def procs() -> Iterator[list]:
    started: list = []
    yield started
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait()


def test_a_blocked_rank_answers_every_ask_with_its_recorder_and_stacks(asked: Path, procs: list) -> None:
    proc = start({"UNILAB_COLLECTIVES_DIR": str(asked), "FAKE_TORCH_DIST_RANK": "2"}, "block")
    procs.append(proc)
    assert first_line(proc) == "watching"
    assert first_line(proc) == "again"
    base = f"2-{proc.pid}"
    fifo = asked / f"ask-{base}"
    assert fifo.is_fifo()
    assert (fifo.stat().st_mode & 0o777) == 0o600

    ask(fifo)
    fr, stacks = asked / f"fr-{base}.json", asked / f"stacks-{base}.txt"
    wait_for(stacks)
    wait_for(fr)
    dump = json.loads(fr.read_text())
    assert dump["pg_status"]["0"]["last_enqueued_collective"] == "8"
    assert dump["entries"][0]["profiling_name"] == "gloo:all_reduce"
    assert dump["fake_dumps"] == 1
    text = stacks.read_text()
    assert "blocked_in_all_reduce" in text, text
    assert (fr.stat().st_mode & 0o777) == 0o600
    assert not [p.name for p in asked.iterdir() if p.name.endswith(".tmp")]

    # A second ask is answered too: the same thread, waiting again.
    before = fr.stat().st_mtime_ns
    ask(fifo)
    deadline = time.monotonic() + PATIENCE
    while json.loads(fr.read_text())["fake_dumps"] != 2:
        assert time.monotonic() < deadline, "the second ask was not answered"
        time.sleep(0.02)
    assert fr.stat().st_mtime_ns >= before
    assert proc.poll() is None, "the trainer must go on"


def test_nccls_empty_recorder_gives_way_to_the_one_with_entries(asked: Path, procs: list) -> None:
    env = {"UNILAB_COLLECTIVES_DIR": str(asked), "FAKE_TORCH_DIST_RANK": "0", "FAKE_TORCH_NCCL": "1"}
    proc = start(env, "block")
    procs.append(proc)
    assert first_line(proc) == "watching"
    ask(asked / f"ask-0-{proc.pid}")
    fr = asked / f"fr-0-{proc.pid}.json"
    wait_for(asked / f"stacks-0-{proc.pid}.txt")
    assert json.loads(fr.read_text())["entries"], "the generic recorder's dump, with entries"


@pytest.mark.parametrize("mode, says", [("raise", "the fake recorder failed"), ("absent", "has no _dump_fr_trace_json")])
def test_a_recorder_that_fails_or_is_missing_is_named_and_the_stacks_still_come(
    asked: Path, procs: list, mode: str, says: str
) -> None:
    env = {"UNILAB_COLLECTIVES_DIR": str(asked), "FAKE_TORCH_DIST_RANK": "1", "FAKE_TORCH_FR": mode}
    proc = start(env, "block")
    procs.append(proc)
    assert first_line(proc) == "watching"
    ask(asked / f"ask-1-{proc.pid}")
    wait_for(asked / f"stacks-1-{proc.pid}.txt")
    error = asked / f"fr-1-{proc.pid}.error"
    wait_for(error)
    assert says in error.read_text()
    assert not (asked / f"fr-1-{proc.pid}.json").exists()
    assert proc.poll() is None


@pytest.mark.parametrize(
    "env",
    [
        {"FAKE_TORCH_DIST_RANK": "0"},  # no soak asks
        {"UNILAB_COLLECTIVES_DIR": "{dir}"},  # init_process_group not called
        {"UNILAB_COLLECTIVES_DIR": "{dir}/missing", "FAKE_TORCH_DIST_RANK": "0"},  # no directory
    ],
)
def test_without_a_soak_or_a_process_group_it_is_a_no_op(asked: Path, procs: list, env: Dict[str, str]) -> None:
    proc = start({k: v.format(dir=asked) for k, v in env.items()})
    procs.append(proc)
    assert first_line(proc) == "not watching"
    assert proc.wait(timeout=PATIENCE) == 0
    assert list(asked.iterdir()) == []


def test_without_torch_it_is_a_no_op(asked: Path, procs: list) -> None:
    full = dict(os.environ, UNILAB_COLLECTIVES_DIR=str(asked), PYTHONPATH=str(UNILAB_PARENT))
    out = subprocess.run(
        [sys.executable, "-c", "import unilab; print(unilab.watch_collectives())"],
        env=full, capture_output=True, text=True, timeout=PATIENCE,
    )
    assert (out.returncode, out.stdout.strip()) == (0, "False"), out.stderr
    assert list(asked.iterdir()) == []
