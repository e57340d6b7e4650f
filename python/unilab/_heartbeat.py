"""``unilab.heartbeat``: one JSON line a step, appended to the file ``soak run`` names in
``UNILAB_HEARTBEAT``.

The line (the contract ``soak run`` reads, whatever language writes it): one JSON object,
UTF-8, ending in ``\\n``, at most 64 KiB with its newline. ``step`` an integer >= 0 (required),
``phase`` a text of 1 to 64 characters, none a control character (default ``"train"``): what
the trainer does from this beat on, ``t`` Unix seconds as a number, when the beat was sent (this
helper always writes it), and any other key of at most 64 characters whose value is a finite
number is a user number (``loss``, ``samples``, ``tokens``, ...). A step is the time from one
beat to the next; it is the phase's the first beat named: beat after each train step,
``phase="checkpoint"`` as a checkpoint starts and a plain beat once it is saved. The limits are
the supervisor's (``src/soak/heartbeat/beat.rs``, ``reader.rs``); a test checks they agree.

Invariants this module keeps:

- A heartbeat never ends or blocks a training run. Values that only the run's data decides are
  dropped and counted (``heartbeat_errors()["dropped_values"]``, one ``RuntimeWarning`` the
  first time), never raised: a number that is not finite (a diverged ``nan`` loss, ``inf``, an
  int too large for a double), a bad phase (the beat is written as a ``train`` beat, so it is
  still progress), a number name over 64 characters or that is not valid text.
- The same checks run with and without ``UNILAB_HEARTBEAT``: a call that raises under
  ``soak run`` raises without it too, so it shows in the first try of a script, never first
  under unilab. What raises is what no data changes: a ``step`` ``operator.index()`` refuses or
  out of 0..2**64-1, a number ``float()`` refuses, a number named ``t``, a line over 64 KiB.
  Without the variable nothing is written: no file, no I/O error.
- ``step`` is anything ``operator.index()`` takes, a number anything ``float()`` takes (NumPy
  scalars, 0-d tensors); one ``operator.index()`` takes is written as the exact integer it
  gives. ``float()`` of a CUDA tensor waits for the GPU to finish the work before it.
- Each line leaves in ONE ``write(2)`` on a descriptor opened
  ``O_WRONLY|O_APPEND|O_CLOEXEC|O_NONBLOCK``. On Linux a single write to an ``O_APPEND`` regular
  file on a local filesystem is not interleaved with another process's or thread's single write,
  so threads and forked dataloader workers can beat at once without tearing each other's lines.
  Only a short write (which local files do not do) is finished by a second write, and that one
  could tear; it is counted.
- Nothing blocks for the file: ``O_NONBLOCK`` makes a FIFO without a reader fail the open
  (``ENXIO``) and a full pipe fail the write (``EAGAIN``) instead of waiting for ever; the beat
  is dropped and counted like any I/O error. The lock only guards opening and the counters, and
  a beat that comes back into it on the same thread (a signal handler's, while this thread
  opens the file) is dropped rather than waiting for itself.
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
  counted (:func:`heartbeat_errors`), one ``RuntimeWarning`` is issued, and nothing raises.
"""

from __future__ import annotations

import operator
import os
import re
import sys
import threading
import time
import warnings
from typing import Dict, Optional, SupportsFloat, SupportsIndex, Tuple, Union

ENV = "UNILAB_HEARTBEAT"
MAX_LINE_BYTES = 64 * 1024
MAX_PHASE_CHARS = 64
MAX_NAME_CHARS = 64
DEFAULT_PHASE = "train"
_MAX_STEP = 2**64 - 1
_CACHE_LIMIT = 1024
_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NONBLOCK
# The characters the supervisor refuses in a phase: Rust's `char::is_control` (Unicode's Cc).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

# What went wrong, for :func:`heartbeat_errors`. Module globals that only the failure paths
# touch (under ``_lock``), so a beat that succeeds costs nothing here.
dropped = 0
"""Beats not written: the file could not be opened or a write failed."""
short_writes = 0
"""Writes the kernel cut short; the rest of the line went out in another write and may be torn."""
dropped_values = 0
"""Values left out of their beats: numbers not finite, bad phases, bad number names."""

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
_index = operator.index
_float_repr = float.__repr__
_int_repr = int.__repr__

# The open descriptor: (the variable's value it was opened for, the fd; None: the open failed).
# One tuple assigned in one statement and read once by a beat, so a thread never pairs a new
# path with an old (closed, or not yet opened) fd. ``_lock`` guards opening and the counters,
# never a write. Re-entrant: a signal handler that beats while its thread holds the lock (in an
# open, or counting a failure) must not wait for itself; ``_opening`` tells it an open is under
# way on its own thread (only the lock's holder sees it set), and its beat is dropped.
_opened: Tuple[Union[str, bytes, None], Optional[int]] = (None, None)
_lock = threading.RLock()
_opening = False
_warned = False
_warned_values = False

# Encoded pieces, cached: a phase's `,"phase":"…","t":` and a number name's `,"name":`.
_phase_prefix: Dict[str, str] = {}
_key_prefix: Dict[str, str] = {}


def heartbeat(
    step: SupportsIndex,
    phase: str = DEFAULT_PHASE,
    **numbers: Union[SupportsFloat, SupportsIndex],
) -> None:
    """Record that ``step`` ended and ``phase`` runs from now on (a train step by default; pass
    ``phase="checkpoint"`` as a checkpoint starts), with any numbers of the step (``loss=0.7``,
    ``samples=256``): one line appended to ``$UNILAB_HEARTBEAT``; nothing written without the
    variable, though the arguments are checked the same way.

    ``step`` is anything ``operator.index()`` takes (``int``, NumPy integers, integer 0-d
    tensors), a number anything ``float()`` takes (NumPy scalars, 0-d tensors: ``float()`` of a
    CUDA tensor waits for the GPU). Dropped and counted in ``heartbeat_errors()
    ["dropped_values"]``, never raised (a ``RuntimeWarning`` the first time): a number that is
    not finite (``nan``, ``inf``, an int past a double's range), a bad ``phase`` (not a ``str``
    of 1 to 64 characters without control characters, U+0000-001F and U+007F-009F: the beat
    goes as a ``train`` beat), a number name over 64 characters or not valid text.

    Raises ``TypeError``/``ValueError`` for what no data changes: a ``step`` that
    ``operator.index()`` refuses or outside 0..2**64-1, a number that ``float()`` refuses, a
    number named ``t``, a line over 64 KiB. Never raises or waits for the file: its I/O errors
    are counted (:func:`heartbeat_errors`) and warned about once.
    """
    now = _time()
    if type(step) is not int or step < 0 or step > _MAX_STEP:
        step = _check_step(step)
    prefix = _phase_prefix.get(phase) if type(phase) is str else None
    if prefix is None:
        prefix = _encode_phase(phase)
    parts = ['{"step":', _int_repr(step), prefix, _float_repr(now)]
    for name, value in numbers.items():
        key = _key_prefix.get(name)
        if key is None:
            key = _encode_key(name)
            if key is None:
                continue
        kind = type(value)
        if kind is float:
            if value - value != 0.0:  # inf or nan
                _drop_value(f"{name}={value!r}", "not a finite number")
                continue
            text = _float_repr(value)
        elif kind is int and -(2**53) <= value <= 2**53:
            text = _int_repr(value)
        else:
            text = _number_text(name, value)
            if text is None:
                continue
        parts.append(key)
        parts.append(text)
    parts.append("}\n")
    # Phases and names were checked to be valid text, so this encodes.
    data = "".join(parts).encode("utf-8")
    if len(data) > MAX_LINE_BYTES:
        raise ValueError(
            f"heartbeat: the line would be {len(data)} bytes, over the 64 KiB a line the "
            "supervisor reads; beat fewer or shorter-named numbers"
        )
    path = _env_get(_env_key)
    if not path:
        return
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
    could not be opened or a write failed), ``short_writes`` (lines the kernel took in two
    writes, which another writer could have torn) and ``dropped_values`` (values left out of
    their beats, with or without ``UNILAB_HEARTBEAT``: numbers not finite, bad phases, number
    names over 64 characters or not valid text)."""
    return {"dropped": dropped, "short_writes": short_writes, "dropped_values": dropped_values}


def _check_step(step: object) -> int:
    try:
        number = _index(step)
    except TypeError:
        raise TypeError(
            "heartbeat: step must be an integer (anything operator.index() takes), "
            f"not {type(step).__name__}"
        ) from None
    if number < 0 or number > _MAX_STEP:
        raise ValueError(f"heartbeat: step must be between 0 and 2**64-1, not {number}")
    return number


def _phase_fault(phase: object) -> Optional[str]:
    """Why the supervisor would refuse ``phase``; None when it takes it."""
    if not isinstance(phase, str):
        return f"not a str but {type(phase).__name__}"
    if not 1 <= len(phase) <= MAX_PHASE_CHARS:
        return f"{len(phase)} characters, not 1 to {MAX_PHASE_CHARS}"
    try:
        phase.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"not valid text ({error.reason})"
    control = _CONTROL.search(phase)
    if control is not None:
        return f"a control character ({control.group()!r} at {control.start()})"
    return None


def _encode_phase(phase: object) -> str:
    """The cached line piece of ``phase``; the default phase's when it is bad (dropped)."""
    fault = _phase_fault(phase)
    if fault is not None:
        _drop_value(f"phase {_shown(phase)}", f"{fault}; the beat goes as `{DEFAULT_PHASE}`")
        phase = DEFAULT_PHASE
        cached = _phase_prefix.get(phase)
        if cached is not None:
            return cached
    prefix = f',"phase":{_json_string(str(phase))},"t":'
    if type(phase) is str and len(_phase_prefix) < _CACHE_LIMIT:
        _phase_prefix[phase] = prefix
    return prefix


def _encode_key(name: str) -> Optional[str]:
    """The cached line piece of the number name ``name``; None when it is dropped."""
    if name == "t":
        raise ValueError("heartbeat: `t` is the time of the beat, which heartbeat writes itself")
    if len(name) > MAX_NAME_CHARS:
        _drop_value(f"number {_shown(name)}", f"a name of {len(name)} characters, over "
                    f"{MAX_NAME_CHARS}")
        return None
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as error:
        _drop_value(f"number {_shown(name)}", f"a name that is not valid text ({error.reason})")
        return None
    key = f",{_json_string(name)}:"
    if len(_key_prefix) < _CACHE_LIMIT:
        _key_prefix[name] = key
    return key


def _number_text(name: str, value: object) -> Optional[str]:
    """A number of another type than ``int``/``float`` (or an int past 2**53): what
    ``operator.index()`` takes as the exact integer, else what ``float()`` gives; None when it
    is dropped (not finite, or too large for a double)."""
    if isinstance(value, float):  # a subclass: NumPy's float64
        number = float(value)
    else:
        try:
            integer = _index(value)  # bool, NumPy integers, integer tensors: exact
        except TypeError:
            try:
                number = float(value)
            except OverflowError:
                _drop_value(f"{name}={_shown(value)}", "too large for a double")
                return None
            except (TypeError, ValueError) as error:
                raise TypeError(
                    f"heartbeat: {name} must be a number (anything float() takes), not "
                    f"{type(value).__name__} ({error})"
                ) from None
        else:
            if -(2**53) <= integer <= 2**53:
                return _int_repr(integer)
            try:
                float(integer)
            except OverflowError:
                _drop_value(f"{name}={_shown(integer)}", "too large for a double")
                return None
            return _int_repr(integer)
    if number - number != 0.0:
        _drop_value(f"{name}={number!r}", "not a finite number")
        return None
    return _float_repr(number)


def _shown(value: object) -> str:
    """``value`` as a warning names it: its repr, at most 60 characters of it."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value's repr must not end the run either
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _drop_value(what: str, why: str) -> None:
    global dropped_values, _warned_values
    with _lock:
        dropped_values += 1
        if _warned_values:
            return
        _warned_values = True
    try:
        warnings.warn(
            f"unilab.heartbeat: {what} dropped ({why}); dropped values are counted in "
            "unilab.heartbeat_errors()['dropped_values'] and warned about once, training "
            "goes on",
            RuntimeWarning,
            stacklevel=_callers_level(),
        )
    except Exception:  # noqa: BLE001 - warnings turned into errors must not end the run
        pass


def _callers_level() -> int:
    """The ``stacklevel`` that names the frame that called :func:`heartbeat`."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_globals is globals():
        level, frame = level + 1, frame.f_back
    return level


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
    global _opened, _opening
    failure = None
    with _lock:
        if _opening:
            return None  # this thread is opening it: a signal handler's beat, dropped
        _opening = True
        try:
            opened_path, fd = _opened
            if path == opened_path:
                return fd  # another thread (or a handler on this one) opened it meanwhile
            if fd is not None:
                # The variable now names another file. The old pair goes before its fd is
                # closed, so a beat that reads it from now on cannot write to the number once
                # another file reuses it (one that read it just before still can: the window is
                # this close).
                _opened = (opened_path, None)
                _close_quietly(fd)
            try:
                fd = os.open(path, _FLAGS)
            except OSError as error:
                fd, failure = None, error
            _opened = (path, fd)
        finally:
            _opening = False
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
            stacklevel=_callers_level(),
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
    global _opened, _lock, _opening, dropped, short_writes, dropped_values
    if _opened[1] is not None:
        _close_quietly(_opened[1])
    _opened = (None, None)
    _lock = threading.RLock()  # another thread may have held it at the fork
    _opening = False
    # The child's counts are its own; one warning of each kind is enough.
    dropped = short_writes = dropped_values = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
