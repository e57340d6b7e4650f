"""User-owned CUDA MPS control daemons, as the original ``unilab.training.cuda_mps_cli``.

Start, verify, inspect, hand out the environment for, and stop an NVIDIA MPS control daemon
that belongs to this user on this host — never a daemon or process unilab cannot prove it
started (a process is known by its pid *and* its start time). Every function runs the ``unilab``
binary once with ``--json``; ``root`` is its state root (``--root``; default
``$UNILAB_ROOT``, else ``$XDG_STATE_HOME/unilab``, else ``~/.local/state/unilab``).

Errors: :class:`CudaMpsError` for what you can act on (fail-closed refusals: its message and
``hint`` say what to do), :class:`StaleCudaMpsDaemonError` when a recorded daemon turned out
not to be live and its record was cleaned.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from .._binary import (
    EXIT_REFUSED,
    EXIT_STALE,
    UnilabError,
    binary_path,
    call_json,
    raise_for,
    run,
)
from .._framework_probe import view

__all__ = [
    "ControlPipeStatus",
    "CudaMpsError",
    "DaemonRecord",
    "GpuIdentity",
    "HostStatus",
    "StaleCudaMpsDaemonError",
    "TopologyPlan",
    "daemon_process_is_live",
    "daemon_status",
    "discover_gpus",
    "doctor",
    "environment_for_daemon",
    "host_status",
    "list_daemon_records",
    "main",
    "read_daemon_record",
    "resolve_topology",
    "select_environment_for_gpu",
    "start_daemon",
    "stop_all_daemons",
    "stop_daemon",
    "visible_gpus",
]

PathLike = Union[str, "os.PathLike[str]"]


class CudaMpsError(UnilabError):
    """A user-actionable refusal or error: unilab failed closed. The message says what is
    wrong, ``hint`` what to do."""


class StaleCudaMpsDaemonError(CudaMpsError):
    """A recorded daemon is no longer live (gone, or its pid now another process's): its
    record was cleaned, and nothing was signalled."""


_KINDS = {EXIT_REFUSED: CudaMpsError, EXIT_STALE: StaleCudaMpsDaemonError}


def _call(args: Sequence[str], root: Optional[PathLike] = None, **kw: Any) -> Any:
    kw.setdefault("kinds", _KINDS)
    return call_json(args, root=root, **kw)


def _fields(cls: type, value: Mapping[str, Any]) -> dict[str, Any]:
    """The values of ``cls``'s fields from a JSON object (fields it lacks: their defaults)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in value.items() if k in names}


@dataclasses.dataclass(frozen=True)
class GpuIdentity:
    """A GPU: its index (the CUDA ordinal under the current mask; nvidia-smi's for
    ``discover_gpus``) and its UUID."""

    index: int
    uuid: str

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> "GpuIdentity":
        return cls(index=int(value["index"]), uuid=str(value["uuid"]))

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "uuid": self.uuid}


@dataclasses.dataclass(frozen=True)
class DaemonRecord:
    """What unilab recorded of a daemon it started: the process (pid and start time, in clock
    ticks), its pipe and log directories, its GPUs, and the limits it was started with."""

    name: str
    uid: int
    host: str
    topology_mode: str
    gpu_uuids: tuple[str, ...]
    pipe_directory: Path
    log_directory: Path
    pid: int
    process_start_ticks: int
    created_at: float
    active_thread_percentage: Optional[int] = None
    pinned_memory_limit: Optional[str] = None
    job: Optional[str] = None

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> "DaemonRecord":
        fields = _fields(cls, value)
        fields["gpu_uuids"] = tuple(value.get("gpu_uuids") or ())
        fields["pipe_directory"] = Path(value["pipe_directory"])
        fields["log_directory"] = Path(value["log_directory"])
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        value = dataclasses.asdict(self)
        value["gpu_uuids"] = list(self.gpu_uuids)
        value["pipe_directory"] = str(self.pipe_directory)
        value["log_directory"] = str(self.log_directory)
        return value


@dataclasses.dataclass(frozen=True)
class ControlPipeStatus:
    """A control pipe directory on this host: its path, what its ``control`` is (``socket``,
    ``fifo``, ``other``) and the names of unilab's daemons that use it (none: not ours)."""

    path: Path
    kind: str
    managed_names: tuple[str, ...]

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> "ControlPipeStatus":
        return cls(
            path=Path(value["path"]),
            kind=str(value["kind"]),
            managed_names=tuple(value.get("managed_names") or ()),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "kind": self.kind, "managed_names": list(self.managed_names)}


@dataclasses.dataclass(frozen=True)
class HostStatus:
    """What this host has: the platform, whether nvidia-smi answers, the visibility mask, the
    visible GPUs, the control pipes, your daemons, and the topology modes the GPUs allow."""

    platform: str
    nvidia_smi_available: bool
    cuda_visible_devices: Optional[str]
    gpus: tuple[GpuIdentity, ...]
    control_pipes: tuple[ControlPipeStatus, ...]
    managed_daemons: tuple[DaemonRecord, ...]
    diagnostic: Optional[str]
    compatible_topology_modes: tuple[str, ...]

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> "HostStatus":
        return cls(
            platform=str(value["platform"]),
            nvidia_smi_available=bool(value["nvidia_smi_available"]),
            cuda_visible_devices=value.get("cuda_visible_devices"),
            gpus=tuple(GpuIdentity.from_dict(g) for g in value.get("gpus") or ()),
            control_pipes=tuple(
                ControlPipeStatus.from_dict(p) for p in value.get("control_pipes") or ()
            ),
            managed_daemons=tuple(
                DaemonRecord.from_dict(d) for d in value.get("managed_daemons") or ()
            ),
            diagnostic=value.get("diagnostic"),
            compatible_topology_modes=tuple(value.get("compatible_topology_modes") or ()),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "nvidia_smi_available": self.nvidia_smi_available,
            "cuda_visible_devices": self.cuda_visible_devices,
            "gpus": [g.to_dict() for g in self.gpus],
            "control_pipes": [p.to_dict() for p in self.control_pipes],
            "managed_daemons": [d.to_dict() for d in self.managed_daemons],
            "diagnostic": self.diagnostic,
            "compatible_topology_modes": list(self.compatible_topology_modes),
        }


@dataclasses.dataclass(frozen=True)
class TopologyPlan:
    """What a selector resolves to: the selector, the topology mode (``single_gpu``,
    ``single_task_multi_gpu``, ``task_per_gpu``) and the GPUs, by UUID."""

    selector: str
    topology_mode: str
    gpus: tuple[GpuIdentity, ...]

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> "TopologyPlan":
        return cls(
            selector=str(value.get("selector") or ""),
            topology_mode=str(value["topology_mode"]),
            gpus=tuple(GpuIdentity.from_dict(g) for g in value.get("gpus") or ()),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "selector": self.selector,
            "topology_mode": self.topology_mode,
            "gpus": [g.to_dict() for g in self.gpus],
        }


def _without_mask() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def discover_gpus() -> list[GpuIdentity]:
    """Every GPU nvidia-smi reports on this host, in its order (the mask ignored)."""
    return list(host_status(env=_without_mask()).gpus)


def visible_gpus() -> list[GpuIdentity]:
    """The GPUs visible under ``CUDA_VISIBLE_DEVICES``, numbered as CUDA numbers them (parsing
    stops at the first invalid entry, as CUDA's does)."""
    return list(host_status().gpus)


def host_status(
    root: Optional[PathLike] = None, *, env: Optional[Mapping[str, str]] = None
) -> HostStatus:
    """What this host has: GPUs, control pipes, your daemons (read-only)."""
    return HostStatus.from_dict(_call(["mps", "status"], root, env=env))


def resolve_topology(selector: Optional[str] = None) -> TopologyPlan:
    """What ``selector`` resolves to under the current mask (``None``: the single visible
    GPU); raises :class:`CudaMpsError` when it resolves to nothing or is ambiguous."""
    args = ["mps", "plan"] + ([selector] if selector is not None else [])
    return TopologyPlan.from_dict(_call(args))


def list_daemon_records(root: Optional[PathLike] = None) -> list[DaemonRecord]:
    """Your recorded daemons on this host (read-only)."""
    return [DaemonRecord.from_dict(d) for d in _call(["mps", "list"], root)]


def daemon_status(root: Optional[PathLike] = None, name: Optional[str] = None) -> dict[str, Any]:
    """A recorded daemon with its liveness: the record's fields and ``state`` (``live``,
    ``gone``, ``pid_reused``, ``wedged``...), with the evidence unilab gives for it. ``name``
    ``None`` selects the sole recorded daemon."""
    return _select(_call(["mps", "list"], root), name)


def read_daemon_record(root: Optional[PathLike] = None, name: Optional[str] = None) -> DaemonRecord:
    """The record of the daemon ``name`` (``None``: the sole live one). Raises
    :class:`CudaMpsError` when there is none, or several and no name."""
    if name is not None:
        return DaemonRecord.from_dict(_select(_call(["mps", "list"], root), name))
    # The sole live record is the one `mps env` would pick; unilab says which, or why none.
    env = _call(["mps", "env"], root)
    pipe = env.get("CUDA_MPS_PIPE_DIRECTORY")
    for record in list_daemon_records(root):
        if str(record.pipe_directory) == pipe:
            return record
    raise CudaMpsError("no live daemon is recorded", hint="see `unilab mps list`")


def _select(records: Sequence[Mapping[str, Any]], name: Optional[str]) -> dict[str, Any]:
    if name is None:
        if len(records) == 1:
            return dict(records[0])
        names = ", ".join(str(r.get("name")) for r in records) or "none"
        raise CudaMpsError(
            f"{len(records)} daemons are recorded ({names}): name one",
            hint="see `unilab mps list`",
        )
    for record in records:
        if record.get("name") == name:
            return dict(record)
    raise CudaMpsError(f"no daemon named `{name}` is recorded", hint="see `unilab mps list`")


def daemon_process_is_live(record: DaemonRecord, root: Optional[PathLike] = None) -> bool:
    """Whether ``record``'s process is still the daemon unilab started: the same pid *and*
    start time, answering on its control socket. A pid alone proves nothing."""
    for value in _call(["mps", "list"], root):
        if (
            value.get("name") == record.name
            and value.get("pid") == record.pid
            and value.get("process_start_ticks") == record.process_start_ticks
        ):
            return value.get("state") == "live"
    return False


def start_daemon(
    selector: Optional[str] = None,
    name: Optional[str] = None,
    pipe_dir: Optional[PathLike] = None,
    log_dir: Optional[PathLike] = None,
    root: Optional[PathLike] = None,
    daemon: bool = True,
    foreground_runner: Optional[Callable[[list[str]], Any]] = None,
    *,
    active_thread_percentage: Optional[int] = None,
    pinned_memory_limit: Optional[str] = None,
) -> Optional[DaemonRecord]:
    """Start an MPS control daemon for one GPU and return its record once it answers.

    ``daemon=False`` runs it in the foreground instead, until it is stopped (Ctrl-C): the
    command runs through ``foreground_runner(argv)`` if given (``subprocess.run`` otherwise)
    and nothing is returned. Raises :class:`CudaMpsError` when unilab refuses (a selector of
    several GPUs, a daemon already serving the GPU, a pipe directory in use...)."""
    args = ["mps", "start"]
    for flag, value in (
        ("--name", name),
        ("--pipe-dir", pipe_dir),
        ("--log-dir", log_dir),
        ("--active-thread-percentage", active_thread_percentage),
        ("--pinned-memory-limit", pinned_memory_limit),
    ):
        if value is not None:
            args += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    if selector is not None:
        args.append(selector)
    if not daemon:
        argv = [binary_path()] + (["--root", os.fspath(root)] if root is not None else [])
        argv += args + ["--foreground"]
        runner = foreground_runner or (lambda a: subprocess.run(a, check=False))
        runner(argv)
        return None
    return DaemonRecord.from_dict(_call(args, root))


def _stopped(value: Any) -> list[DaemonRecord]:
    return [DaemonRecord.from_dict(v) for v in (value if isinstance(value, list) else [value])]


def stop_daemon(name: Optional[str] = None, root: Optional[PathLike] = None) -> DaemonRecord:
    """Stop the daemon ``name`` (``None``: the sole live one) and return its record. Raises
    :class:`StaleCudaMpsDaemonError` when it was no longer live (its record is cleaned)."""
    stopped = _stopped(_call(["mps", "stop"] + ([name] if name else []), root))
    if not stopped:
        raise CudaMpsError("no daemon was stopped", hint="see `unilab mps list`")
    return stopped[0]


def stop_all_daemons(root: Optional[PathLike] = None) -> list[DaemonRecord]:
    """Stop every daemon unilab started for you on this host; their records."""
    return _stopped(_call(["mps", "stop", "--all"], root))


def environment_for_daemon(
    record: Union[DaemonRecord, str, None] = None, root: Optional[PathLike] = None
) -> dict[str, str]:
    """The variables that point CUDA clients at a daemon (``CUDA_MPS_PIPE_DIRECTORY``,
    ``CUDA_MPS_LOG_DIRECTORY``, ``CUDA_VISIBLE_DEVICES``): of ``record`` (a record or a name;
    ``None``: the sole live daemon), checked live first."""
    name = record.name if isinstance(record, DaemonRecord) else record
    return dict(_call(["mps", "env"] + ([name] if name else []), root))


def select_environment_for_gpu(gpu_uuid: str, root: Optional[PathLike] = None) -> dict[str, str]:
    """The environment of the sole live daemon that serves the GPU ``gpu_uuid``."""
    return dict(_call(["mps", "env", "--gpu", gpu_uuid], root))


def doctor(
    selector: Optional[str] = None,
    root: Optional[PathLike] = None,
    torch_module: Optional[ModuleType] = None,
) -> dict[str, Any]:
    """Check everything ``start_daemon`` depends on, read-only: nvidia-smi, the mask, the
    selector, an existing daemon, the pipe and log directories — and, when ``torch_module`` is
    given or ``torch`` imports, the framework's view of the GPUs against unilab's. Returns the
    report (``ok``, ``checks``: each ``name``, ``status``, ``detail``, ``hint``; ``plan``)."""
    args = ["mps", "doctor"] + ([selector] if selector is not None else [])
    if torch_module is None:
        try:
            import torch as torch_module  # type: ignore[import-not-found,no-redef]
        except ImportError:
            torch_module = None
    view_file = None
    try:
        if torch_module is not None:
            # The same probe `mps doctor --python` runs; unilab compares what it found.
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(view(torch_module), f)
                view_file = f.name
            args += ["--framework-view", view_file]
        done = run(args, root=root)
    finally:
        if view_file is not None:
            os.unlink(view_file)
    # A failed check exits 3 with the report on standard output: the report is the answer.
    try:
        report = json.loads(done.stdout) if done.stdout.strip() else None
    except ValueError:
        report = None
    if report is None:
        raise_for(done.stderr, done.returncode, _KINDS)
    if not isinstance(report, dict) or "checks" not in report:
        raise CudaMpsError(f"unilab answered a report that does not read: {report!r}")
    return report


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``unilab mps ARGV`` with this process's standard streams; its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    return subprocess.run([binary_path(), "mps", *args], check=False).returncode
