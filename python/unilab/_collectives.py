"""``unilab.watch_collectives()``: lets ``unilab`` read a rank's collectives while the rank is
stuck in one.

A Python signal handler never runs while the main thread is blocked in ``work.wait()``, and
Gloo writes no flight-recorder dump on its timeout; a thread of the trainer's own can. After
``init_process_group``, ``watch_collectives()`` starts one daemon thread per process that waits
on its own FIFO ``$UNILAB_COLLECTIVES_DIR/ask-<rank>-<pid>`` (one per process: a FIFO wakes one
reader). Each time unilab opens it (and writes anything, or nothing, and closes it) the thread
writes beside it:

- ``fr-<rank>-<pid>.json``: torch's flight recorder as JSON (``_dump_nccl_trace_json`` when
  NCCL's recorder holds entries, else the backend-agnostic ``_dump_fr_trace_json``, whichever
  this torch has), or ``fr-<rank>-<pid>.error`` saying why there is none;
- ``stacks-<rank>-<pid>.txt``: the Python stack of every thread (``faulthandler``'s form).

Each file is written aside (``.<name>.<pid>.tmp``, mode 0600) and renamed into place, so a
reader never sees half of one. Invariants:

- A no-op (returns ``False``) without ``UNILAB_COLLECTIVES_DIR`` (no soak asks), without
  ``torch.distributed`` or before its process group is initialised; ``True`` once watching.
  A second call in the same process does nothing more.
- It never raises into training, at the call or later: every failure is swallowed (the thread
  ends when its FIFO can no longer be opened), and the thread is a daemon, so it never holds
  the process open.
"""

from __future__ import annotations

import faulthandler
import json
import os
import stat
import sys
import threading
import traceback
from typing import Any, Optional, Tuple

#: The variable ``soak run`` sets to the directory where it asks and reads.
DIR_ENV = "UNILAB_COLLECTIVES_DIR"

# torch's JSON dumps, most specific first: ProcessGroupNCCL's own recorder (where NCCL's
# collectives go), then the generic one Gloo and the hooks record into (torch >= 2.8).
_DUMPS = ("_dump_nccl_trace_json", "_dump_fr_trace_json")

_lock = threading.Lock()
_watching_pid: Optional[int] = None


def watch_collectives() -> bool:
    """Start answering unilab's requests for this rank's collectives and stacks; see the
    module's docs. Returns whether a watcher runs (``False`` is no error)."""
    global _watching_pid
    try:
        directory = os.environ.get(DIR_ENV)
        if not directory:
            return False
        rank = _initialised_rank()
        if rank is None:
            return False
        with _lock:
            pid = os.getpid()
            if _watching_pid == pid:
                return True
            fifo = os.path.join(directory, f"ask-{rank}-{pid}")
            if not _make_fifo(fifo):
                return False
            thread = threading.Thread(
                target=_serve, args=(fifo, directory, rank, pid), name="unilab-collectives", daemon=True
            )
            thread.start()
            _watching_pid = pid
            return True
    except BaseException:  # noqa: BLE001 - never into training, whatever it was
        return False


def _initialised_rank() -> Optional[int]:
    try:
        import torch.distributed as dist
    except BaseException:  # noqa: BLE001 - no torch, or one that fails to import
        return None
    try:
        if not dist.is_available() or not dist.is_initialized():
            return None
        return int(dist.get_rank())
    except BaseException:  # noqa: BLE001
        return None


def _make_fifo(path: str) -> bool:
    try:
        os.mkfifo(path, 0o600)
        return True
    except FileExistsError:
        # Left by a process of the same pid before (a restarted container): reuse a FIFO.
        try:
            return stat.S_ISFIFO(os.lstat(path).st_mode)
        except OSError:
            return False
    except OSError:
        return False


def _serve(fifo: str, directory: str, rank: int, pid: int) -> None:
    while True:
        try:
            # Blocks, without the GIL, until unilab opens the FIFO to write.
            fd = os.open(fifo, os.O_RDONLY)
        except BaseException:  # noqa: BLE001 - the FIFO is gone: the soak ended
            return
        try:
            while os.read(fd, 4096):
                pass
        except BaseException:  # noqa: BLE001
            pass
        finally:
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            _answer(directory, rank, pid)
        except BaseException:  # noqa: BLE001 - the next ask tries again
            pass


def _answer(directory: str, rank: int, pid: int) -> None:
    base = f"{rank}-{pid}"
    trace, why = _fr_json()
    if trace is not None:
        _write_aside(os.path.join(directory, f"fr-{base}.json"), trace)
        _remove(os.path.join(directory, f"fr-{base}.error"))
    else:
        _write_aside(os.path.join(directory, f"fr-{base}.error"), why.encode("utf-8", "replace"))
    _write_aside(os.path.join(directory, f"stacks-{base}.txt"), None)


def _fr_json() -> Tuple[Optional[bytes], str]:
    """torch's flight recorder as JSON bytes, or None and why not."""
    try:
        import torch._C._distributed_c10d as c10d
    except BaseException as e:  # noqa: BLE001
        return None, f"torch._C._distributed_c10d cannot be imported: {e!r}"
    first: Optional[bytes] = None
    reasons = []
    for name in _DUMPS:
        dump = getattr(c10d, name, None)
        if dump is None:
            reasons.append(f"this torch has no {name}")
            continue
        try:
            raw: Any = dump()
        except BaseException as e:  # noqa: BLE001
            reasons.append(f"{name} failed: {e!r}")
            continue
        data = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
        if first is None:
            first = data
        if _has_entries(data):
            return data, ""
    if first is not None:
        return first, ""
    return None, "; ".join(reasons)


def _has_entries(data: bytes) -> bool:
    try:
        return bool(json.loads(data).get("entries"))
    except BaseException:  # noqa: BLE001
        return False


def _write_aside(path: str, data: Optional[bytes]) -> None:
    """Write ``data`` (None: every thread's stack) beside ``path``, then rename it there."""
    head, name = os.path.split(path)
    aside = os.path.join(head, f".{name}.{os.getpid()}.tmp")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        if data is None:
            _stacks(fd)
        else:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.replace(aside, path)


def _stacks(fd: int) -> None:
    try:
        faulthandler.dump_traceback(fd, all_threads=True)
        return
    except BaseException:  # noqa: BLE001 - no real descriptor here: the frames by hand
        pass
    lines = []
    for ident, frame in sys._current_frames().items():
        lines.append(f"Thread {ident:#x} (most recent call first):\n")
        lines.extend(reversed(traceback.format_stack(frame)))
    os.write(fd, "".join(lines).encode("utf-8", "replace"))


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
