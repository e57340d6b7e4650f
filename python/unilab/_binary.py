"""Finding and running the ``unilab`` binary, and its JSON errors as exceptions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from typing import Any, Mapping, Optional, Sequence

# The documented exit codes (DESIGN: "Exit codes").
EXIT_REFUSED = 3
EXIT_STALE = 4
EXIT_DAMAGED = 5


class UnilabError(RuntimeError):
    """unilab refused or failed: ``str(error)`` is its message, ``hint`` what to do about it,
    ``exit_code`` the binary's exit code (3 a refusal you can act on, 5 a damaged log, 70 an
    internal error), ``causes`` the chain of causes it gave."""

    def __init__(
        self,
        message: str,
        *,
        hint: Optional[str] = None,
        exit_code: int = EXIT_REFUSED,
        causes: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code
        self.causes = list(causes)

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nhint: {self.hint}"


def binary_path() -> str:
    """The ``unilab`` binary: ``$UNILAB_BIN`` if set, else the one this interpreter's
    environment installed (the wheel puts it in its scripts directory), else ``unilab`` on
    ``PATH``."""
    named = os.environ.get("UNILAB_BIN")
    if named:
        return named
    exe = "unilab.exe" if sys.platform == "win32" else "unilab"
    schemes = [sysconfig.get_path("scripts")]
    try:
        schemes.append(sysconfig.get_path("scripts", f"{os.name}_user"))
    except KeyError:  # pragma: no cover - no user scheme
        pass
    for scripts in schemes:
        if scripts:
            candidate = os.path.join(scripts, exe)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    found = shutil.which(exe)
    if found:
        return found
    raise FileNotFoundError(
        "the unilab binary was not found: install the wheel (`pip install unilab`), "
        "put `unilab` on PATH, or name it in UNILAB_BIN"
    )


def error_of(stderr: str, exit_code: int) -> Optional[dict[str, Any]]:
    """The JSON error object unilab wrote on standard error under ``--json``, if any: the last
    line that reads as an object with an ``error``."""
    for line in reversed(stderr.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "error" in value:
            return value
    return None


def raise_for(
    stderr: str,
    exit_code: int,
    kinds: Mapping[int, type[UnilabError]] = {},
) -> None:
    """Raise the error unilab reported: the class ``kinds`` maps its exit code to, else
    :class:`UnilabError`."""
    found = error_of(stderr, exit_code)
    if found is None:
        tail = stderr.strip().splitlines()[-5:]
        message = "\n".join(tail) or f"unilab exited with {exit_code}"
        raise kinds.get(exit_code, UnilabError)(message, exit_code=exit_code)
    raise kinds.get(exit_code, UnilabError)(
        str(found.get("error")),
        hint=found.get("hint"),
        exit_code=int(found.get("exit_code", exit_code)),
        causes=[str(c) for c in found.get("causes") or []],
    )


def _argv(args: Sequence[str], root: Optional[os.PathLike[str] | str] = None) -> list[str]:
    """``unilab --json --color never [--root ROOT] ARGS``: how the package calls the binary."""
    argv = [binary_path(), "--json", "--color", "never"]
    if root is not None:
        argv += ["--root", os.fspath(root)]
    return argv + list(args)


def run(
    args: Sequence[str],
    *,
    root: Optional[os.PathLike[str] | str] = None,
    env: Optional[Mapping[str, str]] = None,
    stdin: Optional[str] = None,
) -> subprocess.CompletedProcess[str]:
    """``unilab --json [--root ROOT] ARGS``, standard output and error captured as text."""
    argv = _argv(args, root)
    return subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else None,
        check=False,
    )


def call_json(
    args: Sequence[str],
    *,
    root: Optional[os.PathLike[str] | str] = None,
    env: Optional[Mapping[str, str]] = None,
    kinds: Mapping[int, type[UnilabError]] = {},
    accept: Sequence[int] = (0,),
) -> Any:
    """Run unilab and return its JSON answer; an exit code outside ``accept`` raises."""
    done = run(args, root=root, env=env)
    if done.returncode not in accept:
        raise_for(done.stderr, done.returncode, kinds)
    try:
        return json.loads(done.stdout)
    except ValueError as e:
        raise UnilabError(
            f"unilab answered what is not JSON ({e}): {done.stdout[:200]!r}",
            exit_code=done.returncode,
        ) from None


# How much of unilab's standard error `run_passing_stderr` reads at a time, and keeps.
_CHUNK = 64 * 1024
_KEEP = 64 * 1024


def _where_the_last_line_starts(data: bytes, at_line_start: bool) -> int:
    """Where the last line of ``data`` (ended or not) starts, if it begins with ``{`` and may be
    unilab's JSON error; else ``len(data)``. ``at_line_start``: whether ``data`` starts a line."""
    body = data[:-1] if data.endswith(b"\n") else data
    start = body.rfind(b"\n") + 1
    if start == 0 and not at_line_start:
        return len(data)
    return start if data[start : start + 1] == b"{" else len(data)


def run_passing_stderr(
    args: Sequence[str],
    *,
    env: Optional[Mapping[str, str]] = None,
    keep: int = _KEEP,
    answers: Sequence[int] = (0, 1),
) -> subprocess.CompletedProcess[str]:
    """``unilab --json ARGS`` with its standard error (where a supervised command's output
    goes) copied to this process's as it comes — in chunks, whether or not they end a line, so
    that a progress bar redrawn with ``\r`` passes at once and costs no memory — and its last
    ``keep`` bytes kept for the error (unilab's own error is its last line). That error is not
    copied: a last line that begins with ``{`` waits until more follows it or unilab exits, and
    is passed on then unless unilab exited with a code outside ``answers`` and the line is its
    JSON error, which the caller raises instead. A standard error that fails stops the copy,
    never the command: what follows is still read, so that it never blocks on a full pipe."""
    import codecs
    import threading

    argv = _argv(args)
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
    )
    assert process.stdout is not None and process.stderr is not None
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(process.stdout.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    tail = bytearray()
    sink = getattr(sys.stderr, "buffer", None)
    text = codecs.getincrementaldecoder("utf-8")("replace")
    passing = True

    def pass_on(data: bytes) -> None:
        nonlocal passing
        if not data or not passing:
            return
        try:
            if sink is not None:
                sink.write(data)
                sink.flush()
            else:
                sys.stderr.write(text.decode(data))
                sys.stderr.flush()
        except (OSError, ValueError):
            passing = False

    held = b""
    at_line_start = True
    while True:
        chunk = process.stderr.read1(_CHUNK)
        if not chunk:
            break
        data = held + chunk
        cut = _where_the_last_line_starts(data, at_line_start or bool(held))
        if len(data) - cut > keep:
            # Longer than the error that is kept: not unilab's.
            cut = len(data)
        pass_on(data[:cut])
        held = data[cut:]
        if not held:
            at_line_start = data.endswith(b"\n")
        tail += chunk
        if len(tail) > keep:
            del tail[:-keep]
    code = process.wait()
    reader.join()
    if held and (code in answers or error_of(held.decode("utf-8", "replace"), code) is None):
        pass_on(held)
    return subprocess.CompletedProcess(
        argv, code, b"".join(out).decode("utf-8", "replace"), tail.decode("utf-8", "replace")
    )
