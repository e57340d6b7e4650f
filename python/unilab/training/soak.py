"""Soak supervision of a long training command, as the original ``unilab.training.soak``.

``run_soak`` runs the command in its own process group under the ``unilab`` binary, which samples
its whole process tree from ``/proc`` and the GPUs from ``nvidia-smi``, treats growth of
``progress_dir`` as the liveness signal, and writes the artifact to ``output_path``. It reads
``/proc`` and ``nvidia-smi`` instead of importing a GPU framework, so it stays usable while the
trainer and its subprocesses are the only owners of the GPU. Every soak is also recorded in
unilab's event log (``unilab soak show``, ``unilab soak report``, ``unilab history``).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Mapping, Optional, Sequence, Union

from .._binary import UnilabError, call_json, raise_for, run_passing_stderr

__all__ = ["SoakFailureError", "run_soak", "runtime_snapshot"]

PathLike = Union[str, "os.PathLike[str]"]


class SoakFailureError(RuntimeError):
    """The soak ran and failed: ``artifact`` is the artifact (as ``run_soak`` would have
    returned it), ``failure_kind`` why (``stale_progress``, ``startup_timeout``,
    ``command_failed``, ``too_short``, ``leaked_processes``, ...), ``reason`` in words."""

    def __init__(self, artifact: dict[str, Any]) -> None:
        outcome = artifact.get("outcome") or {}
        self.artifact = artifact
        self.failure_kind: Optional[str] = outcome.get("failure_kind")
        self.reason: str = outcome.get("reason") or "the soak failed"
        super().__init__(f"soak {artifact.get('soak_id')} failed: {self.reason}")


# The flags `run_soak` passes, by the parameter that gives each: unilab's messages name flags,
# which a Python caller never typed.
_PARAMETERS = {
    "progress-dir": "progress_dir",
    "output": "output_path",
    "sample-interval": "sample_interval_seconds",
    "startup-timeout": "startup_timeout_seconds",
    "stale-progress": "stale_progress_seconds",
    "shutdown-grace": "post_shutdown_grace_seconds",
    "min-duration": "min_duration_seconds",
    "cwd": "cwd",
    "env": "env",
    "meta-json": "metadata",
}
_FLAGS = "|".join(re.escape(flag) for flag in sorted(_PARAMETERS, key=len, reverse=True))
# `--cwd /x` as a message quotes a flag with its value; `--progress-dir` alone.
_FLAG_WITH_VALUE = re.compile(rf"`--({_FLAGS}) ([^`]*)`")
_FLAG = re.compile(rf"(?<![\w-])--({_FLAGS})(?![\w-])")


def _in_python_terms(text: str) -> str:
    """``text`` with the flags of ``soak run`` named as ``run_soak``'s parameters:
    `` `--cwd /x` `` as `` `cwd=/x` ``, `` `--progress-dir` `` as `` `progress_dir=` ``."""
    text = _FLAG_WITH_VALUE.sub(lambda m: f"`{_PARAMETERS[m[1]]}={m[2]}`", text)
    return _FLAG.sub(lambda m: f"{_PARAMETERS[m[1]]}=", text)


def _refusal(stderr: str, exit_code: int) -> UnilabError:
    """The error unilab refused the soak with, said in ``run_soak``'s terms."""
    try:
        raise_for(stderr, exit_code)
    except UnilabError as error:
        return type(error)(
            _in_python_terms(error.message),
            hint=_in_python_terms(error.hint) if error.hint else error.hint,
            exit_code=error.exit_code,
            causes=[_in_python_terms(cause) for cause in error.causes],
        )
    return UnilabError(f"unilab exited with {exit_code}", exit_code=exit_code)


def _seconds(value: float) -> str:
    # Plain seconds, as the command line takes them; repr keeps every digit.
    return repr(float(value))


def _environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` checked as ``subprocess`` would take it: text names and values, no ``=`` in a
    name. A value that is not text is refused, not turned into its ``str`` (``None`` would
    become the value ``"None"``)."""
    checked: dict[str, str] = {}
    for name, value in env.items():
        if not isinstance(name, str):
            raise TypeError(f"env: a variable's name must be a str, not {type(name).__name__}")
        if not name or "=" in name:
            raise ValueError(f"env: {name!r} is not a variable's name")
        if not isinstance(value, str):
            raise TypeError(
                f"env[{name!r}] must be a str, not {type(value).__name__}: "
                "leave the variable out to unset it"
            )
        checked[name] = value
    return checked


def run_soak(
    *,
    command: Sequence[str],
    progress_dir: PathLike,
    output_path: PathLike,
    sample_interval_seconds: float = 5.0,
    startup_timeout_seconds: float = 600.0,
    stale_progress_seconds: float = 120.0,
    post_shutdown_grace_seconds: float = 5.0,
    min_duration_seconds: float = 0.0,
    cwd: Optional[PathLike] = None,
    env: Optional[Mapping[str, str]] = None,
    metadata: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """Run ``command`` under soak supervision and return its artifact when the soak passes.

    The command runs in its own process group; once progress is first observed in
    ``progress_dir``, no file change there for ``stale_progress_seconds`` fails the soak, as do
    no progress within ``startup_timeout_seconds``, a non-zero exit, a run shorter than
    ``min_duration_seconds`` and processes left behind. After a failure the tree is stopped
    (SIGTERM, then SIGKILL after ``post_shutdown_grace_seconds``) and ``SoakFailureError`` is
    raised with the artifact. The artifact is written to ``output_path`` (replaced if it
    exists) either way.

    ``env`` is the command's whole environment, as ``subprocess`` takes it (``None``: this
    process's). ``metadata`` is recorded with the soak: a mapping of names to JSON values.
    The command's output goes to this process's standard error; standard output is unilab's.

    Raises :class:`SoakFailureError` when the soak failed, :class:`unilab.UnilabError` when
    unilab refused to start it (its message and hint say why, naming this function's
    parameters: ``progress_dir=``, ``cwd=``).
    """
    if isinstance(command, (str, bytes)):
        # A string is a sequence too: iterated, "whoami" would run `w`.
        raise TypeError(
            f"command must be a sequence of arguments, not {type(command).__name__}: "
            f"write [{command!r}], or shlex.split() a command line"
        )
    command = [os.fspath(part) for part in command]
    if not command:
        raise ValueError("command must name a program to run")
    args = [
        "soak",
        "run",
        "--progress-dir",
        os.fspath(progress_dir),
        "--output",
        os.fspath(output_path),
        "--force",
        "--sample-interval",
        _seconds(sample_interval_seconds),
        "--startup-timeout",
        _seconds(startup_timeout_seconds),
        "--stale-progress",
        _seconds(stale_progress_seconds),
        "--shutdown-grace",
        _seconds(post_shutdown_grace_seconds),
        "--min-duration",
        _seconds(min_duration_seconds),
    ]
    if cwd is not None:
        args += ["--cwd", os.fspath(cwd)]
    own_env: Optional[dict[str, str]] = None
    if env is not None:
        # The values travel in unilab's own environment, never on its command line (where any
        # user could read them): `--env NAME` takes NAME's value from there.
        own_env = dict(os.environ)
        own_env.update(_environment(env))
        args.append("--env-clear")
        for name in env:
            args += ["--env", str(name)]
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            raise TypeError("metadata must be a mapping of names to JSON values")
        for key, value in metadata.items():
            args += ["--meta-json", f"{key}={json.dumps(value, sort_keys=True)}"]
    args += ["--", *command]
    done = run_passing_stderr(args, env=own_env, answers=(0, 1))
    if done.returncode not in (0, 1):
        raise _refusal(done.stderr, done.returncode)
    with open(os.fspath(output_path), encoding="utf-8") as f:
        artifact: dict[str, Any] = json.load(f)
    if done.returncode == 1:
        raise SoakFailureError(artifact)
    return artifact


def runtime_snapshot(root: PathLike) -> dict[str, Any]:
    """The runtime snapshot of the directory ``root``: its source (git commit, branch,
    whether it is dirty), the GPUs and driver, the software (OS, kernel, Python, CPU, memory)
    and the environment's relevant variables (credentials masked) — what every soak records."""
    snapshot = call_json(["snapshot", os.fspath(root)])
    if not isinstance(snapshot, dict):
        raise UnilabError(f"unilab answered a snapshot that is not an object: {snapshot!r}")
    return snapshot
