"""`unilab.heartbeat`: the line it appends to `$UNILAB_HEARTBEAT`, from threads and forked
workers at once, its refusals, and the I/O errors it counts instead of raising."""

from __future__ import annotations

import enum
import fractions
import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

import unilab
from conftest import FIXTURES
from unilab import _heartbeat


@pytest.fixture
def beats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A heartbeat file as `soak run` makes one (created, 0600), named in UNILAB_HEARTBEAT;
    the once-only warning re-armed for the test."""
    path = tmp_path / "heartbeat"
    path.touch(mode=0o600)
    monkeypatch.setenv("UNILAB_HEARTBEAT", str(path))
    monkeypatch.setattr(_heartbeat, "_warned", False)
    yield path


def lines(path: Path) -> List[Dict[str, Any]]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), data[-200:]
    # Split at b"\n" alone, as the supervisor does (str.splitlines also splits at \x1c, \u2028...).
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def test_without_the_variable_a_beat_does_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    before = unilab.heartbeat_errors()
    for value in (None, ""):
        if value is None:
            monkeypatch.delenv("UNILAB_HEARTBEAT", raising=False)
        else:
            monkeypatch.setenv("UNILAB_HEARTBEAT", value)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert unilab.heartbeat(3, loss=0.5) is None
            unilab.heartbeat(4, "eval", samples=10)
    assert list(tmp_path.iterdir()) == []
    assert unilab.heartbeat_errors() == before


def test_a_beat_is_one_json_line_with_its_time(beats: Path) -> None:
    before = time.time()
    unilab.heartbeat(7, loss=0.25, samples=256)
    unilab.heartbeat(8, "checkpoint")
    unilab.heartbeat(0, 'odd "phase" \\ \u00e9', **{"tokens/s": 1e-7, "big": 2**60, "neg": -3.5})
    after = time.time()
    first, second, third = lines(beats)
    assert first.pop("t") == pytest.approx((before + after) / 2, abs=after - before + 1e-3)
    assert first == {"step": 7, "phase": "train", "loss": 0.25, "samples": 256}
    assert type(first["samples"]) is int
    assert before <= second.pop("t") <= after
    assert second == {"step": 8, "phase": "checkpoint"}
    assert before <= third.pop("t") <= after
    assert third == {"step": 0, "phase": 'odd "phase" \\ \u00e9', "tokens/s": 1e-7,
                     "big": 2**60, "neg": -3.5}


def test_every_character_of_a_name_and_every_other_of_a_phase_reads_back(beats: Path) -> None:
    """A number's name may hold any character; a phase any but a control character (below)."""
    text = "".join(map(chr, range(256))) + "\u00e9\u2028\u4e2d\U0001f600"
    names = [text[i : i + 64] for i in range(0, len(text), 64)]
    printable = "".join(char for char in text if not CONTROL.match(char))
    phases = [printable[i : i + 64] for i in range(0, len(printable), 64)]
    beaten = [(phases[step % len(phases)], name) for step, name in enumerate(names)]
    for step, (phase, name) in enumerate(beaten):
        unilab.heartbeat(step, phase, **{name: step})
    read = lines(beats)
    assert len(read) == len(beaten) == 5
    for step, (line, (phase, name)) in enumerate(zip(read, beaten)):
        assert line["phase"] == phase and line[name] == step


# What Rust's `char::is_control` is (Unicode's Cc), which the supervisor refuses in a phase.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


@pytest.mark.parametrize("char", [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))])
def test_a_phase_with_a_control_character_is_dropped_and_the_beat_goes_as_train(
    beats: Path, char: str
) -> None:
    before = unilab.heartbeat_errors()["dropped_values"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step, phase in enumerate((char, f"a{char}b", "eval" + char)):
            unilab.heartbeat(step, phase, loss=0.5)
    assert [(line["step"], line["phase"], line["loss"]) for line in lines(beats)] == [
        (0, "train", 0.5), (1, "train", 0.5), (2, "train", 0.5)
    ]
    assert unilab.heartbeat_errors()["dropped_values"] == before + 3


class Level(enum.IntEnum):
    HIGH = 3


def test_number_like_values_are_written_as_plain_numbers(beats: Path) -> None:
    unilab.heartbeat(Level.HIGH, level=Level.HIGH, ratio=fractions.Fraction(1, 4))
    (line,) = lines(beats)
    assert line["step"] == 3 and line["level"] == 3 and line["ratio"] == 0.25
    assert beats.read_text().startswith('{"step":3,')


@pytest.mark.parametrize(
    "args, kwargs, error, says",
    [
        ((1.0,), {}, TypeError, "step must be an integer (anything operator.index() takes)"),
        (("1",), {}, TypeError, "step must be an integer"),
        ((None,), {}, TypeError, "step must be an integer"),
        ((-1,), {}, ValueError, "step must be between 0"),
        ((2**64,), {}, ValueError, "step must be between 0"),
        ((1,), {"loss": "half"}, TypeError, "loss must be a number (anything float() takes)"),
        ((1,), {"loss": None}, TypeError, "number (anything float() takes), not NoneType"),
        ((1,), {"loss": [0.5]}, TypeError, "loss must be a number"),
        ((1,), {"t": 1.0}, ValueError, "`t` is the time of the beat"),
        ((1,), {f"n{i:05d}" + "x" * 40: 0.5 for i in range(1300)}, ValueError, "over the 64 KiB"),
    ],
)
def test_bad_arguments_are_refused_with_and_without_the_variable_and_nothing_is_written(
    beats: Path, monkeypatch: pytest.MonkeyPatch, args: tuple, kwargs: dict, error: type,
    says: str
) -> None:
    """What no data changes is refused, and refused without `UNILAB_HEARTBEAT` too: a script
    shows it on its first try, not first under `soak run`."""
    with pytest.raises(error, match=re.escape(says)):
        unilab.heartbeat(*args, **kwargs)
    assert beats.read_bytes() == b""
    monkeypatch.delenv("UNILAB_HEARTBEAT")
    with pytest.raises(error, match=re.escape(says)):
        unilab.heartbeat(*args, **kwargs)


def test_the_largest_line_allowed_is_written(beats: Path) -> None:
    names = {f"n{i:05d}" + "x" * 40: 0.5 for i in range(1200)}
    unilab.heartbeat(1, **names)
    data = beats.read_bytes()
    assert 60 * 1024 < len(data) <= 64 * 1024
    assert len(lines(beats)[0]) == 1200 + 3


def test_four_forked_workers_and_two_threads_beat_without_tearing_a_line(beats: Path) -> None:
    per_writer = 3000
    done = subprocess.run(
        [sys.executable, str(FIXTURES / "beating_trainer.py"), str(per_writer)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    data = beats.read_bytes()
    assert data.endswith(b"\n")
    seen: Dict[int, List[int]] = {}
    sizes = []
    for number, raw in enumerate(data.split(b"\n")[:-1]):
        sizes.append(len(raw) + 1)
        try:
            line = json.loads(raw)
        except ValueError:
            pytest.fail(f"line {number + 1} is torn: {raw[:120]!r}...{raw[-120:]!r}")
        seen.setdefault(line["w"], []).append(line["step"])
    assert seen.pop(-1) == [0]
    assert sorted(seen) == [0, 1, 2, 3, 4, 5]
    for writer, steps in seen.items():
        assert steps == list(range(per_writer)), f"writer {writer} lost or repeated a line"
    assert max(sizes) > 3 * 1024 and min(sizes) < 200


CHILD_REUSES_THE_NUMBER = """
import os, sys, unilab
from unilab import _heartbeat
unilab.heartbeat(0)
inherited = _heartbeat._opened[1]
pid = os.fork()
if pid == 0:
    try:  # a worker that closes what it inherited, then opens a file of its own
        os.close(inherited)
    except OSError:
        pass
    other = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    unilab.heartbeat(1)
    os._exit(0 if other == inherited else 7)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_that_reuses_the_descriptor_number_does_not_get_beats(
    beats: Path, tmp_path: Path
) -> None:
    """The child of `os.fork` opens its own descriptor: the inherited one is closed at the fork,
    so a worker whose own file gets the same number does not receive the child's beats."""
    unrelated = tmp_path / "the-workers-own-file"
    done = subprocess.run(
        [sys.executable, "-c", CHILD_REUSES_THE_NUMBER, str(unrelated)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert unrelated.read_bytes() == b""
    assert [line["step"] for line in lines(beats)] == [0, 1]


BEAT_WHILE_IT_OPENS = """
import sys, threading, unilab
from unilab import _heartbeat

main = threading.main_thread()
waiting = threading.Event()


class Lock:
    # The module's lock, saying when the main thread holds it and when another waits for it.
    def __init__(self):
        self.lock = threading.Lock()
        self.main_holds = False

    def __enter__(self):
        if threading.current_thread() is not main:
            waiting.set()
        self.lock.acquire()
        self.main_holds = threading.current_thread() is main

    def __exit__(self, *exc):
        self.main_holds = False
        self.lock.release()


_heartbeat._lock = Lock()
checkers = []


def beat_from_another_thread(frame, event, arg):
    # At each bytecode of the first open while it holds the lock, another thread beats: it
    # must either wait for the open or find a descriptor that is the file's, never drop a beat.
    frame.f_trace_opcodes = True
    if event == "opcode" and _heartbeat._lock.main_holds:
        waiting.clear()
        checker = threading.Thread(target=unilab.heartbeat, args=(len(checkers) + 1,))
        checkers.append(checker)
        checker.start()
        while checker.is_alive() and not waiting.is_set():
            checker.join(0.01)
    return beat_from_another_thread


def trace(frame, event, arg):
    return beat_from_another_thread if frame.f_code is _heartbeat._open.__code__ else None


sys.settrace(trace)
unilab.heartbeat(0)
sys.settrace(None)
for checker in checkers:
    checker.join()
print(len(checkers), unilab.heartbeat_errors())
sys.exit(1 if any(unilab.heartbeat_errors().values()) else 0)
"""


def test_a_thread_beating_while_another_opens_the_file_gets_a_whole_descriptor(
    beats: Path,
) -> None:
    """The path and the descriptor opened for it change together: a thread beating at any
    moment of another's first open waits for it or writes to the file, never drops its beat."""
    done = subprocess.run(
        [sys.executable, "-c", BEAT_WHILE_IT_OPENS],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    checkers = int(done.stdout.split()[0])
    assert checkers > 10, done.stdout
    steps = sorted(line["step"] for line in lines(beats))
    assert steps == list(range(checkers + 1))


def test_a_missing_file_is_counted_not_created_and_warned_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tmp_path / "removed-heartbeat"
    monkeypatch.setenv("UNILAB_HEARTBEAT", str(gone))
    monkeypatch.setattr(_heartbeat, "_warned", False)
    before = unilab.heartbeat_errors()["dropped"]
    with pytest.warns(RuntimeWarning, match="removed-heartbeat.*training goes on") as caught:
        for step in range(5):
            unilab.heartbeat(step, loss=1.0)
    assert len(caught) == 1
    assert unilab.heartbeat_errors()["dropped"] == before + 5
    assert not gone.exists()


@pytest.mark.parametrize("target", ["directory", "/dev/full"])
def test_an_unwritable_file_is_counted_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    """A directory cannot be opened for writing (by root either); `/dev/full` opens and then
    fails every write with ENOSPC, as a full disk does."""
    if target == "directory":
        path = tmp_path / "a-directory"
        path.mkdir()
    else:
        path = Path(target)
        if not os.access(path, os.W_OK):
            pytest.skip("/dev/full is not writable here")
    monkeypatch.setenv("UNILAB_HEARTBEAT", str(path))
    monkeypatch.setattr(_heartbeat, "_warned", False)
    before = unilab.heartbeat_errors()["dropped"]
    with pytest.warns(RuntimeWarning, match="cannot write") as caught:
        for step in range(3):
            unilab.heartbeat(step)
    assert len(caught) == 1
    assert unilab.heartbeat_errors()["dropped"] == before + 3


def test_a_full_disk_does_not_raise_even_with_warnings_as_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not os.access("/dev/full", os.W_OK):
        pytest.skip("/dev/full is not writable here")
    monkeypatch.setenv("UNILAB_HEARTBEAT", "/dev/full")
    monkeypatch.setattr(_heartbeat, "_warned", False)
    before = unilab.heartbeat_errors()["dropped"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as `python -W error` and `pytest -W error` do
        unilab.heartbeat(1, loss=0.5)
        unilab.heartbeat(2, loss=0.5)
    assert unilab.heartbeat_errors()["dropped"] == before + 2
    assert _heartbeat._warned


def test_a_new_value_of_the_variable_is_followed(
    beats: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unilab.heartbeat(1)
    other = beats.with_name("other-heartbeat")
    other.touch(mode=0o600)
    monkeypatch.setenv("UNILAB_HEARTBEAT", str(other))
    unilab.heartbeat(2)
    monkeypatch.setenv("UNILAB_HEARTBEAT", str(beats))
    unilab.heartbeat(3)
    assert [line["step"] for line in lines(beats)] == [1, 3]
    assert [line["step"] for line in lines(other)] == [2]
