"""Micro-benchmark of `unilab.heartbeat`: nanoseconds a call.

    python3 benches/python_heartbeat.py [--calls N] [--dir DIR]

Prints, each the best of 7 rounds of N calls, the CPU time of the calling thread a call (what
the call costs the trainer; on a machine shared with other work the wall-clock time, also
printed, counts the time others ran too):
- `no-op`: without `UNILAB_HEARTBEAT`, `heartbeat(step, loss=..., samples=...)` (the arguments
  checked and the line built as with it, nothing written);
- `beat, 2 numbers`: the same call appending to a file in DIR (default `$XDG_RUNTIME_DIR`,
  where `soak run` puts it, else the temporary directory);
- `json.dumps + os.write`: the same line built with `json.dumps` instead, for comparison;
- `os.write alone`: the floor, writing an already-built line of the same size.
Imports `unilab` from this source tree (the call is pure Python: the wheel holds the same file).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import unilab  # noqa: E402


def best_ns(stmt: str, calls: int, scope: dict) -> "tuple[float, float]":
    """(CPU, wall) nanoseconds a call, each the best of 7 rounds."""
    cpu = timeit.Timer(stmt, globals=scope, timer=time.thread_time)
    wall = timeit.Timer(stmt, globals=scope, timer=time.perf_counter)
    return tuple(min(t.repeat(number=calls, repeat=7)) / calls * 1e9 for t in (cpu, wall))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--dir", default=os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    args = parser.parse_args()
    os.environ.pop("UNILAB_HEARTBEAT", None)
    heartbeat = unilab.heartbeat
    scope = {"heartbeat": heartbeat, "json": json, "os": os, "time": time}
    rows = [("no-op", best_ns("heartbeat(1234, loss=0.6931, samples=256)", args.calls, scope))]
    with tempfile.TemporaryDirectory(dir=args.dir) as where:
        path = os.path.join(where, "heartbeat")
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        os.environ["UNILAB_HEARTBEAT"] = path
        beat = best_ns("heartbeat(1234, loss=0.6931, samples=256)", args.calls, scope)
        rows.append(("beat, 2 numbers", beat))
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        scope["fd"] = fd
        rows.append((
            "json.dumps + os.write",
            best_ns(
                "os.write(fd, (json.dumps({'step': 1234, 'phase': 'train', 't': time.time(),"
                " 'loss': 0.6931, 'samples': 256}) + '\\n').encode())",
                args.calls,
                scope,
            ),
        ))
        with open(path, "rb") as file:
            scope["line"] = file.readline()
        rows.append(("os.write alone", best_ns("os.write(fd, line)", args.calls, scope)))
        os.close(fd)
        size = os.path.getsize(path)
        lines = size // len(scope["line"])
        if unilab.heartbeat_errors()["dropped"]:
            print(f"error: beats were dropped: {unilab.heartbeat_errors()}", file=sys.stderr)
            return 1
    print(f"python {sys.version.split()[0]}, {args.calls} calls a round, best of 7, in {args.dir}")
    print(f"{'':<24}{'cpu ns/call':>12}{'wall ns/call':>14}")
    for name, (cpu, wall) in rows:
        print(f"{name:<24}{cpu:>12.0f}{wall:>14.0f}")
    print(f"(line: {len(scope['line'])} bytes; {lines} lines written)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
