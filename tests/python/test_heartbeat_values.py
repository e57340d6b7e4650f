"""A heartbeat never ends or blocks a run: what a training loop hands `unilab.heartbeat` (a
`nan` loss, NumPy scalars, 0-d tensors, a bad phase, a long name) is written or dropped and
counted, never raised, the same with and without `UNILAB_HEARTBEAT`; a FIFO or a re-entrant beat
never makes it wait; and its limits are the supervisor's."""

from __future__ import annotations

import decimal
import importlib.util
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

import unilab
from conftest import FIXTURES, REPO
from unilab import _heartbeat

VALUES_TRAINER = FIXTURES / "value_beating_trainer.py"
# A process that would hang without the fix is killed after this: generous, for a loaded host.
HANG = 60

# The trainer's beats and what they should give, from the trainer itself (not put on sys.path).
_spec = importlib.util.spec_from_file_location("value_beating_trainer", VALUES_TRAINER)
assert _spec is not None and _spec.loader is not None
trainer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trainer)


@pytest.fixture
def beats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A heartbeat file as `soak run` makes one, named in UNILAB_HEARTBEAT; the once-only
    warnings re-armed for the test."""
    path = tmp_path / "heartbeat"
    path.touch(mode=0o600)
    monkeypatch.setenv("UNILAB_HEARTBEAT", str(path))
    monkeypatch.setattr(_heartbeat, "_warned", False)
    monkeypatch.setattr(_heartbeat, "_warned_values", False, raising=False)
    yield path


def lines(path: Path) -> List[Dict[str, Any]]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), data[-200:]
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def without_t(line: Dict[str, Any]) -> Dict[str, Any]:
    assert isinstance(line.pop("t"), float)
    return line


def dropped_values() -> int:
    return unilab.heartbeat_errors()["dropped_values"]


class FloatNan(float):
    pass


class NanFloat:
    def __float__(self) -> float:
        return float("nan")


# (numbers, phase, what is written of them) — each call drops exactly one value.
DROPPED = [
    ({"loss": float("nan"), "ok": 1}, "train", {"ok": 1}),
    ({"loss": float("inf"), "ok": 1}, "train", {"ok": 1}),
    ({"loss": -float("inf"), "ok": 1}, "train", {"ok": 1}),
    ({"loss": FloatNan("nan"), "ok": 1}, "train", {"ok": 1}),
    ({"loss": NanFloat(), "ok": 1}, "train", {"ok": 1}),
    ({"loss": decimal.Decimal("Infinity"), "ok": 1}, "train", {"ok": 1}),
    ({"loss": "nan", "ok": 1}, "train", {"ok": 1}),
    ({"n": 10**400, "ok": 1}, "train", {"ok": 1}),
    ({"x" * 65: 1.0, "x" * 64: 2.0}, "train", {"x" * 64: 2.0}),
    ({"\udcff": 1.0, "ok": 1}, "train", {"ok": 1}),
    ({"loss": 0.5}, 0.5, {"loss": 0.5}),
    ({"loss": 0.5}, None, {"loss": 0.5}),
    ({"loss": 0.5}, "", {"loss": 0.5}),
    ({"loss": 0.5}, "p" * 65, {"loss": 0.5}),
    ({"loss": 0.5}, "\ud800", {"loss": 0.5}),
    ({"loss": 0.5}, "eval\n", {"loss": 0.5}),
]


def test_what_a_loop_cannot_help_is_dropped_and_counted_never_raised(beats: Path) -> None:
    """Before: `nan` raised ValueError and a bad phase or a long name TypeError/ValueError under
    `soak run` (the run died as `command_failed`), while the same calls did nothing without
    the variable. Now each value is dropped and counted, the rest of its beat written."""
    before = dropped_values()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # `python -W error`: still nothing raises
        for step, (numbers, phase, _) in enumerate(DROPPED):
            unilab.heartbeat(step, phase, **numbers)  # type: ignore[arg-type]
    assert dropped_values() == before + len(DROPPED)
    written = [without_t(line) for line in lines(beats)]
    assert written == [
        {"step": step, "phase": "train", **kept} for step, (_, _, kept) in enumerate(DROPPED)
    ]


def test_the_same_calls_without_the_variable_count_the_same_and_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("UNILAB_HEARTBEAT", raising=False)
    before = unilab.heartbeat_errors()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step, (numbers, phase, _) in enumerate(DROPPED):
            unilab.heartbeat(step, phase, **numbers)  # type: ignore[arg-type]
    after = unilab.heartbeat_errors()
    assert after == {**before, "dropped_values": before["dropped_values"] + len(DROPPED)}
    assert list(tmp_path.iterdir()) == []


def test_a_dropped_value_is_warned_once_naming_the_callers_line(beats: Path) -> None:
    with pytest.warns(RuntimeWarning) as caught:
        unilab.heartbeat(1, loss=float("nan"))
        unilab.heartbeat(2, loss=float("inf"), **{"y" * 70: 1.0})
        unilab.heartbeat(3, "\t")
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith("unilab.heartbeat: loss=nan dropped (not a finite number)")
    assert "heartbeat_errors()['dropped_values']" in message and "training goes on" in message
    assert caught[0].filename == __file__


def test_numpy_scalars_and_0d_tensors_are_written_as_the_numbers_they_hold(beats: Path) -> None:
    """A step is anything `operator.index()` takes, a number anything `float()` takes; what
    `operator.index()` takes is written as its exact integer."""
    unilab.heartbeat(
        trainer.NumpyInt(3),
        samples=trainer.NumpyInt(256),
        lr=trainer.NumpyFloat(3e-4),
        loss=trainer.Tensor0d(0.125),
        tokens=trainer.Tensor0d(4096, True),
        big=trainer.NumpyInt(2**60 + 1),
        flag=True,
        text="0.5",
        exact=decimal.Decimal("0.25"),
    )
    unilab.heartbeat(trainer.Tensor0d(4, True))
    unilab.heartbeat(True)
    first, second, third = (without_t(line) for line in lines(beats))
    assert first == {
        "step": 3, "phase": "train", "samples": 256, "lr": 3e-4, "loss": 0.125,
        "tokens": 4096, "big": 2**60 + 1, "flag": 1, "text": 0.5, "exact": 0.25,
    }
    assert type(first["samples"]) is int and type(first["tokens"]) is int
    assert '"big":1152921504606846977,' in beats.read_text()
    assert second == {"step": 4, "phase": "train"} and third == {"step": 1, "phase": "train"}


def test_a_float_tensors_index_error_and_a_cuda_error_are_told_apart() -> None:
    """`__index__` refusing (a float tensor) falls back to `float()`; an error that is not a
    refusal (a CUDA error raised by `float()`) is the run's own and propagates."""

    class Broken:
        def __float__(self) -> float:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(RuntimeError, match="illegal memory access"):
        unilab.heartbeat(1, loss=Broken())


def rust_const(path: str, name: str) -> int:
    """The value of `const NAME: usize = EXPR;` in the supervisor's source, EXPR a product of
    integers."""
    text = (REPO / path).read_text()
    found = re.search(rf"const {name}: usize = ([0-9 *]+);", text)
    assert found, f"{name} is no longer a `usize` product in {path}: update this test"
    value = 1
    for factor in found.group(1).split("*"):
        value *= int(factor)
    return value


def test_the_helpers_limits_are_the_supervisors(beats: Path) -> None:
    """A number name over 64 characters was taken by the helper and dropped by the supervisor.
    The helper's limits are read against the reader's source, and the longest name and phase
    they allow are written."""
    assert _heartbeat.MAX_NAME_CHARS == rust_const("src/soak/heartbeat/beat.rs", "MAX_KEY_CHARS")
    assert _heartbeat.MAX_PHASE_CHARS == rust_const(
        "src/soak/heartbeat/beat.rs", "MAX_PHASE_CHARS"
    )
    assert _heartbeat.MAX_LINE_BYTES == rust_const("src/soak/heartbeat/reader.rs", "MAX_LINE")
    longest = "\u00e9" * _heartbeat.MAX_NAME_CHARS  # characters, not bytes, as Rust counts
    before = dropped_values()
    unilab.heartbeat(1, "\u4e2d" * _heartbeat.MAX_PHASE_CHARS, **{longest: 1.0})
    with pytest.warns(RuntimeWarning, match="a name of 65 characters, over 64"):
        unilab.heartbeat(2, **{longest + "e": 1.0})
    assert dropped_values() == before + 1
    first, second = (without_t(line) for line in lines(beats))
    assert first == {"step": 1, "phase": "\u4e2d" * 64, longest: 1.0}
    assert second == {"step": 2, "phase": "train"}


def soak_run(tmp_path: Path, command: List[str]) -> subprocess.CompletedProcess:
    progress = tmp_path / "progress"
    progress.mkdir(mode=0o700, exist_ok=True)
    return subprocess.run(
        [
            str(unilab.binary_path()), "--json", "soak", "run",
            "--progress-dir", str(progress),
            "--output", str(tmp_path / "soak.json"),
            "--sample-interval", "0.2", "--shutdown-grace", "0.5",
            "--", *command,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_nan_inf_and_number_like_objects_never_end_a_soak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `soak run` the first `nan` loss raised and the soak failed as `command_failed`.
    Now the soak passes, the trainer counts its dropped values, the supervisor counts no
    malformed line, and the numbers the objects held are the sample's."""
    monkeypatch.delenv("UNILAB_HEARTBEAT", raising=False)
    command = [sys.executable, "-W", "error", str(VALUES_TRAINER)]
    done = soak_run(tmp_path, command)
    artifact = json.loads((tmp_path / "soak.json").read_text())
    assert done.returncode == 0, (done.stderr, artifact["outcome"], artifact["output_tail"])
    assert artifact["outcome"]["status"] == "passed"
    counted = json.loads(artifact["output_tail"]["stdout"].strip().splitlines()[-1])
    assert counted == {"dropped": 0, "short_writes": 0, "dropped_values": trainer.DROPPED}
    summary = artifact["summary"]
    assert summary["heartbeat_errors"]["malformed"] == 0, summary["heartbeat_errors"]
    assert summary["steps"]["train"]["last"] == 7, summary["steps"]
    sampled = [row["heartbeat"] for row in artifact["samples"] if row.get("heartbeat")]
    assert sampled, artifact["samples"]
    assert sampled[-1]["step"] == 7 and sampled[-1]["numbers"] == trainer.LAST_NUMBERS
    seen = {name for beat in sampled for name in beat["numbers"]}
    assert trainer.NAME_65 not in seen

    # The same trainer without the variable: the same counts, no raise, no file.
    alone = subprocess.run(
        [*command, "0"], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert alone.returncode == 0, alone.stderr
    assert json.loads(alone.stdout.strip().splitlines()[-1]) == counted


BEAT_INTO = """
import json, sys, unilab
for step in range(int(sys.argv[1])):
    unilab.heartbeat(step, loss=0.5, **{"p%02d" % k: 1.0 for k in range(8)})
print(json.dumps(unilab.heartbeat_errors()))
"""


def test_a_fifo_without_a_reader_does_not_block_the_trainer(tmp_path: Path) -> None:
    """`UNILAB_HEARTBEAT` naming a FIFO blocked the trainer for ever in `open`; now the open
    fails at once (`ENXIO`) and the beats are dropped and counted."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    done = subprocess.run(
        [sys.executable, "-c", BEAT_INTO, "5"],
        env={**os.environ, "UNILAB_HEARTBEAT": str(fifo)},
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["dropped"] == 5
    assert "cannot write to" in done.stderr and "training goes on" in done.stderr


def test_a_full_fifo_does_not_block_the_trainer(tmp_path: Path) -> None:
    """A reader that never reads: the pipe fills and a blocking write waited for ever. Now a
    write that would wait is dropped and counted, and what the pipe took is whole lines."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        beats = 5000  # ~150 bytes each: several times a pipe's 64 KiB
        done = subprocess.run(
            [sys.executable, "-c", BEAT_INTO, str(beats)],
            env={**os.environ, "UNILAB_HEARTBEAT": str(fifo)},
            capture_output=True,
            text=True,
            timeout=HANG,
        )
        data = b""
        while True:
            try:
                chunk = os.read(reader, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
    finally:
        os.close(reader)
    assert done.returncode == 0, done.stderr
    dropped = json.loads(done.stdout)["dropped"]
    assert 0 < dropped < beats
    assert data.endswith(b"\n")
    steps = [json.loads(line)["step"] for line in data.split(b"\n")[:-1]]
    assert len(steps) == beats - dropped and steps == sorted(steps)


BEAT_WHILE_IT_OPENS_ON_ITS_OWN_THREAD = """
import os, sys, unilab
from unilab import _heartbeat

handled = []


def owned():
    lock = _heartbeat._lock
    return lock._is_owned() if hasattr(lock, "_is_owned") else lock.locked()


def handler_at_each_opcode(frame, event, arg):
    # A signal handler that beats, run between any two bytecodes of the first open while this
    # thread holds the lock, as CPython runs handlers.
    frame.f_trace_opcodes = True
    if event == "opcode" and owned():
        handled.append(len(handled) + 1)
        unilab.heartbeat(len(handled), "handler")
    return handler_at_each_opcode


def trace(frame, event, arg):
    return handler_at_each_opcode if frame.f_code is _heartbeat._open.__code__ else None


sys.settrace(trace)
unilab.heartbeat(0)
sys.settrace(None)
unilab.heartbeat(len(handled) + 1)
fds = []
for fd in os.listdir("/proc/self/fd"):
    try:
        fds.append(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:  # the listing's own descriptor, closed by now
        pass
print(json.dumps({"handled": len(handled), "errors": unilab.heartbeat_errors(),
                  "open": fds.count(os.path.realpath(os.environ["UNILAB_HEARTBEAT"]))}))
""".replace("import os, sys", "import json, os, sys")


def test_a_beat_from_a_signal_handler_while_its_thread_opens_the_file_does_not_wait_for_itself(
    beats: Path,
) -> None:
    """The lock that guards the open was not re-entrant: a signal handler that beat while its
    own thread held it (opening the file, or counting a failure) waited for itself for ever.
    Now such a beat writes (the file was opened by then) or is dropped and counted; the file is
    open once, and every later beat lands."""
    done = subprocess.run(
        [sys.executable, "-c", BEAT_WHILE_IT_OPENS_ON_ITS_OWN_THREAD],
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    handled, errors = report["handled"], report["errors"]
    assert handled > 5, report
    assert report["open"] == 1, report
    steps = [line["step"] for line in lines(beats)]
    assert len(steps) + errors["dropped"] == handled + 2, (steps, report)
    assert 0 in steps
    assert steps[-1] == handled + 1
