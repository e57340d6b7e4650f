"""unilab: user-owned CUDA MPS daemons and soak supervision for shared GPU hosts.

The package is a thin, typed layer over the ``unilab`` binary that the wheel installs beside it:
every function runs the binary once with ``--json`` and turns its answer into Python values, its
errors into exceptions. No rule is implemented twice: what the command line decides, the
Python API decides the same way.

- :mod:`unilab.training.soak` — ``run_soak``, ``runtime_snapshot``, ``SoakFailureError``.
- :mod:`unilab.training.cuda_mps_cli` — start, inspect, hand out and stop your MPS daemons.
- :func:`heartbeat` — ``heartbeat(step, phase="train", **numbers)`` appends one JSON line a step
  to ``$UNILAB_HEARTBEAT`` (``soak run`` sets it), nothing without it; safe from threads and
  forked workers. It never ends or blocks a run: a ``nan`` loss, a bad phase or a long number
  name is dropped, the file's I/O errors too, and :func:`heartbeat_errors` counts them, the
  same with and without the variable. The one call here that does not run the binary: it is
  meant for every step.
- :func:`watch_collectives` — after ``init_process_group``, one line that lets unilab read this
  rank's flight recorder and every thread's stack while the rank hangs in a collective (a
  daemon thread on a FIFO in ``$UNILAB_COLLECTIVES_DIR``); a no-op without a soak or without
  ``torch.distributed``, and it never raises into training.
- ``python -m unilab ARGS`` runs the binary with ARGS.
"""

from __future__ import annotations

from ._binary import UnilabError, binary_path
from ._collectives import watch_collectives
from ._heartbeat import heartbeat, heartbeat_errors

try:
    from importlib.metadata import PackageNotFoundError, version

    try:
        __version__ = version("unilab")
    except PackageNotFoundError:  # running from a source tree
        __version__ = "0+unknown"
except ImportError:  # pragma: no cover - Python < 3.8
    __version__ = "0+unknown"

__all__ = [
    "UnilabError",
    "binary_path",
    "heartbeat",
    "heartbeat_errors",
    "watch_collectives",
    "__version__",
]
