"""``unilab.heartbeat``: one JSON line a step, appended to the file ``soak run`` names in
``UNILAB_HEARTBEAT``.

The line (the contract ``soak run`` reads, whatever language writes it): one JSON object,
UTF-8, ending in ``\\n``, at most 64 KiB with its newline. ``step`` an integer >= 0 (required),
``phase`` a text of 1 to 64 characters, none a control character (default ``"train"``): what
the trainer does from this beat on, ``t`` Unix seconds as a number, when the beat was sent (this
helper always writes it), and any other key whose value is a finite number is a user number
(``loss``, ``samples``, ``tokens``, ...). A step is the time from one beat to the next; it is
the phase's the first beat named: beat after each train step, ``phase="checkpoint"`` as a
checkpoint starts and a plain beat once it is saved.

Invariants this module keeps:

- Without ``UNILAB_HEARTBEAT`` (or with it empty) a call does nothing beyond looking the
  variable up: no file, no error.
- Each line leaves in ONE ``write(2)`` on a descriptor opened ``O_WRONLY|O_APPEND|O_CLOEXEC``.
  On Linux a single write to an ``O_APPEND`` regular file on a local filesystem is not
  interleaved with another process's or thread's single write, so threads and forked dataloader
  workers can beat at once without tearing each other's lines. Only a short write (which local
  files do not do) is finished by a second write, and that one could tear; it is counted.
- After ``os.fork`` (``multiprocessing``'s fork start method and PyTorch's dataloader workers
  use it) the child opens a descriptor of its own on its first beat: a child may close the
  descriptors it inherited, and the number could then name an unrelated file it opened later.
  An ``os.register_at_fork`` hook closes the inherited one in the child while it is surely
  still ours, so the check on the hot path is only "is the variable still the value we opened".
  A fork the hook does not see (libc's ``fork()`` called from C) keeps using the inherited
  descriptor, which is safe for the lines: parent and child then share one ``O_APPEND`` open
  file, and each write still lands whole at its end.
- A file that cannot be opened is not tried again for the same value of the variable in the
  same process: each later beat is only counted, at no system call.
- The file is never created here: ``soak run`` creates it (mode 0600) before it starts the
  command. A missing or unwritable file, a full disk, any ``OSError``: the beat is dropped and
  counted (:func:`heartbeat_errors`), one ``RuntimeWarning`` is issued, and nothing raises —
  a heartbeat must not end a training run.
- Bad arguments do raise (``TypeError``/``ValueError``) rather than write a line the supervisor
  would count as malformed.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
import warnings
from numbers import Integral, Real
from typing import Dict, Optional, Tuple, Union

ENV = "UNILAB_HEARTBEAT"
MAX_LINE_BYTES = 64 * 1024
MAX_PHASE_CHARS = 64
_MAX_STEP = 2**64 - 1
_CACHE_LIMIT = 1024
_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
# The characters the supervisor refuses in a phase: Rust's `char::is_control` (Unicode's Cc).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

# What went wrong, for :func:`heartbeat_errors`. Module globals that only the failure paths
# touch (under ``_lock``), so a beat that succeeds costs nothing here.
dropped = 0
"""Beats not written: the file could not be opened or a write failed."""
short_writes = 0
"""Writes the kernel cut short; the rest of the line went out in another write and may be torn."""

# The variable is looked up at every call (a trainer's environment may change), in the bytes
# dict behind ``os.environ`` where CPython has one: one dict lookup instead of encoding the name
# and decoding the value each call. ``os.environ[...] = ...`` and ``del`` keep that dict current.
_env_data = getattr(os.environ, "_data", None)
if isinstance(_env_data, dict) and hasattr(os.environ, "encodekey"):
    _env_get = _env_data.get
    _env_key: Union[str, bytes] = os.environ.encodekey(ENV)
else:  # pragma: no cover - another interpreter
    _env_get = os.environ.get
    _env_key = ENV
_write = os.write
_time = time.time
_float_repr = float.__repr__
_int_repr = int.__repr__

# The open descriptor: (the variable's value it was opened for, the fd; None: the open failed).
# One tuple assigned in one statement and read once by a beat, so a thread never pairs a new
# path with an old (closed, or not yet opened) fd. ``_lock`` guards opening and the counters,
# never a write.
_opened: Tuple[Union[str, bytes, None], Optional[int]] = (None, None)
_lock = threading.Lock()
_warned = False

# Encoded pieces, cached: a phase's `,"phase":"…","t":` and a number name's `,"name":`.
_phase_prefix: Dict[str, str] = {}
_key_prefix: Dict[str, str] = {}


def heartbeat(step: int, phase: str = "train", **numbers: Union[int, float]) -> None:
    """Record that ``step`` ended and ``phase`` runs from now on (a train step by default; pass
    ``phase="checkpoint"`` as a checkpoint starts), with any numbers of the step (``loss=0.7``,
    ``samples=256``): one line appended to ``$UNILAB_HEARTBEAT``; nothing without the variable.

    Raises ``TypeError``/``ValueError`` for arguments the supervisor could not read: ``step``
    not an ``int`` (``bool`` is refused) or negative; ``phase`` not a ``str`` of 1 to 64
    characters or holding a control character (U+0000-001F, U+007F-009F); a number not a real number (``bool`` refused; NumPy scalars are converted) or
    not finite; a number named ``t``; a line over 64 KiB. Never raises for the file's I/O
    errors: those are counted (:func:`heartbeat_errors`) and warned about once.
    """
    path = _env_get(_env_key)
    if not path:
        return
    now = _time()
    if type(step) is not int:
        step = _check_step(step)
    elif step < 0 or step > _MAX_STEP:
        _check_step(step)
    prefix = _phase_prefix.get(phase) if type(phase) is str else None
    if prefix is None:
        prefix = _encode_phase(phase)
    parts = ['{"step":', repr(step), prefix, repr(now)]
    for name, value in numbers.items():
        key = _key_prefix.get(name)
        if key is None:
            key = _encode_key(name)
        kind = type(value)
        if kind is float:
            if value - value != 0.0:  # inf or nan
                _check_number(name, value)
            text = repr(value)
        elif kind is int:
            text = repr(value) if -(2**53) <= value <= 2**53 else _big_int(name, value)
        else:
            text = _number_text(name, value)
        parts.append(key)
        parts.append(text)
    parts.append("}\n")
    try:
        data = "".join(parts).encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"heartbeat: a number name is not valid text ({error.reason})") from None
    if len(data) > MAX_LINE_BYTES:
        raise ValueError(
            f"heartbeat: the line would be {len(data)} bytes, over the 64 KiB a line the "
            "supervisor reads; beat fewer or shorter-named numbers"
        )
    opened_path, fd = _opened
    if path != opened_path:
        fd = _open(path)
    if fd is None:
        _failed(None)
        return
    try:
        written = _write(fd, data)
        if written < len(data):
            _finish_short_write(fd, data, written)
    except OSError as error:
        _failed(error)


def heartbeat_errors() -> Dict[str, int]:
    """What this process's heartbeats could not do: ``dropped`` (beats not written: the file
    could not be opened or a write failed) and ``short_writes`` (lines the kernel took in two
    writes, which another writer could have torn)."""
    return {"dropped": dropped, "short_writes": short_writes}


def _check_step(step: object) -> int:
    if isinstance(step, bool) or not isinstance(step, Integral):
        raise TypeError(f"heartbeat: step must be an int, not {type(step).__name__}")
    step = int(step)
    if step < 0 or step > _MAX_STEP:
        raise ValueError(f"heartbeat: step must be between 0 and 2**64-1, not {step}")
    return step


def _encode_phase(phase: object) -> str:
    if not isinstance(phase, str):
        raise TypeError(f"heartbeat: phase must be a str, not {type(phase).__name__}")
    if not 1 <= len(phase) <= MAX_PHASE_CHARS:
        raise ValueError(
            f"heartbeat: phase must have 1 to {MAX_PHASE_CHARS} characters, not {len(phase)}"
        )
    try:
        phase.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"heartbeat: phase is not valid text ({error.reason})") from None
    control = _CONTROL.search(phase)
    if control is not None:
        raise ValueError(
            f"heartbeat: phase must not hold control characters ({control.group()!r} at "
            f"{control.start()}); name the phase in printable text, such as 'eval'"
        )
    prefix = f',"phase":{_json_string(phase)},"t":'
    if type(phase) is str and len(_phase_prefix) < _CACHE_LIMIT:
        _phase_prefix[phase] = prefix
    return prefix


def _encode_key(name: str) -> str:
    if name == "t":
        raise ValueError("heartbeat: `t` is the time of the beat, which heartbeat writes itself")
    key = f",{_json_string(name)}:"
    if len(_key_prefix) < _CACHE_LIMIT:
        _key_prefix[name] = key
    return key


def _check_number(name: str, value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"heartbeat: {name}={value!r} is not a finite number")
    return value


def _big_int(name: str, value: int) -> str:
    try:
        float(value)
    except OverflowError:
        raise ValueError(f"heartbeat: {name} is too large for a JSON number") from None
    return _int_repr(value)


def _number_text(name: str, value: object) -> str:
    """A number of another type than ``int``/``float``: their subclasses and NumPy-style
    scalars (``numbers.Integral``/``Real``) are written as the plain number they hold."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        raise TypeError(f"heartbeat: {name} must be a number, not a bool")
    if isinstance(value, Integral):
        number = int(value)
        return _int_repr(number) if -(2**53) <= number <= 2**53 else _big_int(name, number)
    if isinstance(value, Real):
        return _float_repr(_check_number(name, float(value)))
    raise TypeError(f"heartbeat: {name} must be an int or a float, not {type(value).__name__}")


def _json_string(text: str) -> str:
    # Escapes what JSON requires; other characters go as UTF-8.
    out = ['"']
    for char in text:
        if char == '"' or char == "\\":
            out.append("\\" + char)
        elif char < " " or char == "\x7f":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _open(path: Union[str, bytes]) -> Optional[int]:
    """The descriptor for ``path`` in this process, opened on first use (or after a fork or a
    change of the variable); None when it cannot be opened (the caller counts the beat)."""
    global _opened
    failure = None
    with _lock:
        opened_path, fd = _opened
        if path == opened_path:
            return fd  # another thread opened it meanwhile
        if fd is not None:
            # The variable now names another file. The old pair goes before its fd is closed,
            # so a beat that reads it from now on cannot write to the number once another file
            # reuses it (one that read it just before still can: the window is this close).
            _opened = (opened_path, None)
            _close_quietly(fd)
        try:
            fd = os.open(path, _FLAGS)
        except OSError as error:
            fd, failure = None, error
        _opened = (path, fd)
    if failure is not None:
        _warn_once(failure)
    return fd


def _finish_short_write(fd: int, data: bytes, written: int) -> None:
    global short_writes
    with _lock:
        short_writes += 1
    view = memoryview(data)
    while written < len(data):
        more = _write(fd, view[written:])
        if more <= 0:
            raise OSError(f"wrote nothing of the last {len(data) - written} bytes of a line")
        written += more


def _failed(error: Optional[OSError]) -> None:
    global dropped
    with _lock:
        dropped += 1
    if error is not None:
        _warn_once(error)


def _warn_once(error: OSError) -> None:
    global _warned
    with _lock:
        if _warned:
            return
        _warned = True
    try:
        warnings.warn(
            f"unilab.heartbeat: cannot write to {os.environ.get(ENV)!r} "
            f"({error.strerror or error}); beats are dropped and counted in "
            "unilab.heartbeat_errors(), training goes on",
            RuntimeWarning,
            stacklevel=4,
        )
    except Exception:  # noqa: BLE001 - warnings turned into errors must not end the run
        pass


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _after_fork_in_child() -> None:
    # The inherited descriptor is still ours here (no user code has run in the child yet):
    # close it, and let the child's first beat open its own.
    global _opened, _lock, dropped, short_writes
    if _opened[1] is not None:
        _close_quietly(_opened[1])
    _opened = (None, None)
    _lock = threading.Lock()  # another thread may have held it at the fork
    dropped = short_writes = 0  # the child's counts are its own; one warning is enough


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
