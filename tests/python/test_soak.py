"""`unilab.training.soak` against the example trainer, through the installed binary."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO, trainer
from unilab import UnilabError
from unilab.training.soak import SoakFailureError, run_soak, runtime_snapshot

FAST = dict(sample_interval_seconds=0.2, post_shutdown_grace_seconds=0.5)


def test_a_passing_soak_returns_its_artifact(tmp_path: Path, progress: Path) -> None:
    output = tmp_path / "soak.json"
    artifact = run_soak(
        command=trainer(progress, "--steps", "6", "--step-seconds", "0.1"),
        progress_dir=progress,
        output_path=output,
        metadata={"lr": 0.001, "tags": ["baseline", "bf16"], "note": None},
        **FAST,
    )
    assert artifact["outcome"]["status"] == "passed"
    assert artifact["exit"]["code"] == 0
    assert artifact["metadata"]["lr"] == 0.001
    assert artifact["metadata"]["tags"] == ["baseline", "bf16"]
    assert artifact["metadata"]["note"] is None
    assert artifact["summary"]["samples"] >= 1
    assert output.exists()
    # The original replaced an existing output: so does run_soak.
    again = run_soak(
        command=trainer(progress, "--steps", "2", "--step-seconds", "0.1"),
        progress_dir=progress,
        output_path=output,
        **FAST,
    )
    assert again["soak_id"] != artifact["soak_id"]


def test_a_failing_soak_raises_with_its_artifact(tmp_path: Path, progress: Path) -> None:
    with pytest.raises(SoakFailureError) as caught:
        run_soak(
            command=trainer(progress, "--steps", "3", "--step-seconds", "0.1", "--exit-code", "3"),
            progress_dir=progress,
            output_path=tmp_path / "soak.json",
            **FAST,
        )
    error = caught.value
    assert isinstance(error, RuntimeError)
    assert error.failure_kind == "command_failed"
    assert "3" in error.reason
    assert error.artifact["outcome"]["status"] == "failed"
    assert error.artifact["exit"]["code"] == 3


def test_env_is_the_commands_whole_environment(
    tmp_path: Path, progress: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNILAB_TEST_OUTSIDE", "leaked")
    artifact = run_soak(
        command=trainer(
            progress, "--steps", "2", "--step-seconds", "0.1",
            "--print-env", "RUN_NAME", "--print-env", "UNILAB_TEST_OUTSIDE",
        ),
        progress_dir=progress,
        output_path=tmp_path / "soak.json",
        env={"PATH": os.environ["PATH"], "RUN_NAME": "baseline"},
        cwd=tmp_path,
        **FAST,
    )
    stdout = artifact["output_tail"]["stdout"]
    assert "RUN_NAME=baseline" in stdout
    assert "UNILAB_TEST_OUTSIDE=None" in stdout, stdout
    assert artifact["cwd"] == str(tmp_path)


def test_a_refusal_before_the_start_raises_the_clis_message_and_hint(tmp_path: Path) -> None:
    with pytest.raises(UnilabError) as caught:
        run_soak(
            command=[sys.executable, "-c", "pass"],
            progress_dir=tmp_path / "missing",
            output_path=tmp_path / "soak.json",
        )
    error = caught.value
    assert error.exit_code == 3
    assert "missing" in error.message
    assert error.hint
    assert not (tmp_path / "soak.json").exists()


def test_a_refusal_prints_nothing_raw_and_names_the_python_parameters(
    tmp_path: Path, progress: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """On every refusal `run_soak` copied unilab's JSON error object to standard error before
    raising, and the hint told a Python caller to check `--progress-dir`. The error is raised
    alone, and its message and hint name the parameter (`progress_dir=`, `cwd=`)."""
    with pytest.raises(UnilabError) as caught:
        run_soak(
            command=[sys.executable, "-c", "pass"],
            progress_dir=tmp_path / "missing",
            output_path=tmp_path / "soak.json",
        )
    said = capfd.readouterr().err
    assert '"error"' not in said and '"exit_code"' not in said, said
    hint = caught.value.hint or ""
    assert "progress_dir=" in hint and "--progress-dir" not in hint, hint
    assert "progress_dir=" in str(caught.value)

    with pytest.raises(UnilabError) as caught:
        run_soak(
            command=[sys.executable, "-c", "pass"],
            progress_dir=progress,
            output_path=tmp_path / "soak.json",
            cwd=tmp_path / "nowhere",
        )
    said = capfd.readouterr().err
    assert '"error"' not in said, said
    message = caught.value.message
    assert "cwd=" in message and "--cwd" not in message, message


def test_the_commands_own_json_lines_still_pass_through(
    tmp_path: Path, progress: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """What the command prints is passed on whole, a last line that looks like unilab's JSON
    error included: only unilab's own error, on a refusal, is held back."""
    script = (
        "import os, sys\n"
        f"open(os.path.join({str(progress)!r}, 'step'), 'w').close()\n"
        "sys.stderr.write('{\"error\": \"mine\", \"exit_code\": 3}\\n')\n"
    )
    run_soak(
        command=[sys.executable, "-c", script],
        progress_dir=progress,
        output_path=tmp_path / "soak.json",
        **FAST,
    )
    said = capfd.readouterr().err
    assert '{"error": "mine", "exit_code": 3}' in said, said


def test_runtime_snapshot_reads_the_source_and_the_host() -> None:
    snapshot = runtime_snapshot(REPO)
    assert snapshot["source"]["git"] is None or "commit" in snapshot["source"]["git"]
    assert snapshot["software"]["python"]
    assert {"gpu", "environment"} <= set(snapshot)


def python_block(page: Path, marker: str = "") -> str:
    """The first ```python block of ``page`` after the line that starts with ``marker``."""
    text = page.read_text()
    if marker:
        text = text[text.index(marker) :]
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def run_in_a_clone(
    block: str, tmp_path: Path, path: str
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Run ``block`` as a user runs a file of it: with this interpreter, from a clone with the
    example trainer in its scripts/, under ``umask 002`` and in a directory that umask leaves
    group-writable, ``PATH`` as given. The clone and what the run printed are returned."""
    clone = tmp_path / "clone"
    clone.mkdir()
    clone.chmod(0o775)
    (clone / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "example-trainer.py", clone / "scripts")
    (clone / "example.py").write_text(block)
    done = subprocess.run(
        [sys.executable, "example.py"],
        cwd=clone,
        env={**os.environ, "PATH": path},
        preexec_fn=lambda: os.umask(0o002),
        capture_output=True,
        text=True,
        timeout=600,
    )
    return clone, done


def test_the_readmes_python_block_runs_as_written_without_a_gpu_tool_under_umask_002(
    tmp_path: Path,
) -> None:
    """The README's Python block failed as a new user ran it: it started an MPS daemon, which
    needs NVIDIA's tools (on a host without them, `CudaMpsError: cannot list this host's
    GPUs`), and it made `progress` in the current directory, which under umask 002 is a clone's
    group-writable directory, so unilab refused the progress directory. The block now soaks the
    example trainer alone (no GPU tool needed) with its progress in a fresh 0700 directory."""
    block = python_block(REPO / "README.md", "<!-- python-tour")
    without_fakes = os.pathsep.join(
        entry
        for entry in os.environ["PATH"].split(os.pathsep)
        if entry and Path(entry).resolve() != FIXTURES.resolve()
    )
    clone, done = run_in_a_clone(block, tmp_path, without_fakes)
    assert done.returncode == 0, done.stderr
    assert "passed:" in done.stdout, done.stdout
    artifact = json.loads((clone / "soak.json").read_text())
    assert artifact["outcome"]["status"] == "passed"


def test_the_originals_usage_in_docs_runs_as_written_with_the_fakes_under_umask_002(
    tmp_path: Path,
) -> None:
    """docs/python.md's block (the original's usage) made `progress` in the current directory,
    refused under umask 002 in a clone; as written now, with the bundled fakes on PATH as the
    page says, it starts a daemon, soaks under it and stops it."""
    block = python_block(REPO / "docs" / "python.md", "<!-- python-usage -->")
    clone, done = run_in_a_clone(block, tmp_path, os.environ["PATH"])
    assert done.returncode == 0, done.stderr
    artifact = json.loads((clone / "soak.json").read_text())
    assert artifact["outcome"]["status"] == "passed"
    assert artifact["metadata"] == {"daemon": "trainer", "lr": 3e-4}
    assert artifact["parameters"]["environment"]["CUDA_MPS_PIPE_DIRECTORY"]


def test_a_command_given_as_one_string_is_refused_not_run_letter_by_letter(
    tmp_path: Path, progress: Path
) -> None:
    """`run_soak(command="whoami")` ran `w`: a string is a sequence, and was iterated into the
    arguments `['w', 'h', 'o', 'a', 'm', 'i']`. A `str` or `bytes` command is a `TypeError`."""
    output = tmp_path / "soak.json"
    for command in ("whoami", b"whoami"):
        with pytest.raises(TypeError, match="sequence of arguments"):
            run_soak(command=command, progress_dir=progress, output_path=output, **FAST)  # type: ignore[arg-type]
    assert not output.exists()


def test_an_env_value_that_is_not_text_is_refused_not_recorded_as_its_str(
    tmp_path: Path, progress: Path
) -> None:
    """`env={"RUN_NAME": None}` gave the command `RUN_NAME=None`: every value went through
    `str()`. A value that is not a `str` is a `TypeError` naming the variable, before anything
    runs."""
    output = tmp_path / "soak.json"
    for value in (None, 3, b"bytes"):
        with pytest.raises(TypeError, match="RUN_NAME"):
            run_soak(
                command=trainer(progress, "--steps", "2", "--step-seconds", "0.1"),
                progress_dir=progress,
                output_path=output,
                env={"PATH": os.environ["PATH"], "RUN_NAME": value},  # type: ignore[dict-item]
                **FAST,
            )
    with pytest.raises(ValueError, match="not a variable's name"):
        run_soak(
            command=trainer(progress),
            progress_dir=progress,
            output_path=output,
            env={"A=B": "x"},
            **FAST,
        )
    assert not output.exists()


# A trainer that draws a progress bar with `\r` and no newline: a first frame, then — once the
# test has seen that frame arrive (the file `go`) — MIB frames of 1 MiB each.
PROGRESS_BAR = r"""
import os, sys, time
progress, go, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
open(os.path.join(progress, "started"), "w").close()
sys.stderr.write("\rstep 0 FIRST-FRAME")
sys.stderr.flush()
deadline = time.monotonic() + 30
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.05)
frame = "\r" + "#" * (1024 * 1024 - 1)
for _ in range(mib):
    sys.stderr.write(frame)
sys.stderr.flush()
open(os.path.join(progress, "done"), "w").close()
sys.exit(0 if os.path.exists(go) else 3)
"""

# `run_soak` of that trainer, printing how much the wrapper's own peak memory grew.
WRAPPER = r"""
import json, resource, sys
from unilab.training.soak import SoakFailureError, run_soak
progress, output, bar, go, mib = sys.argv[1:6]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    artifact = run_soak(
        command=[sys.executable, bar, progress, go, mib],
        progress_dir=progress,
        output_path=output,
        sample_interval_seconds=0.2,
        post_shutdown_grace_seconds=0.5,
    )
except SoakFailureError as failure:
    artifact = failure.artifact
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"grew_kib": grew, "outcome": artifact["outcome"]}))
"""


def test_output_without_newlines_passes_through_as_it_comes_in_bounded_memory(
    tmp_path: Path, progress: Path
) -> None:
    """A progress bar redrawn with `\\r` never ends a line, and `run_soak` read unilab's
    standard error a line at a time: nothing of it reached the caller until the command ended,
    and the wrapper held the whole "line" (400 frames of 1 MiB: 829 MiB). It is read and passed
    on in chunks, keeping 64 KiB: the first frame arrives while the command waits for it, and
    128 MiB of frames leave the wrapper's peak memory where it was."""
    mib = 128
    bar, wrapper, go = tmp_path / "bar.py", tmp_path / "wrapper.py", tmp_path / "go"
    bar.write_text(PROGRESS_BAR)
    wrapper.write_text(WRAPPER)
    process = subprocess.Popen(
        [sys.executable, str(wrapper), str(progress), str(tmp_path / "soak.json"), str(bar), str(go), str(mib)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    passed = {"bytes": 0, "first_frame": False}

    def relay() -> None:
        assert process.stderr is not None
        start = b""
        while chunk := process.stderr.read1(1 << 16):
            passed["bytes"] += len(chunk)
            if not passed["first_frame"]:
                start += chunk
                if b"FIRST-FRAME" in start:
                    passed["first_frame"] = True
                    go.touch()

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    try:
        process.wait(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(timeout=30)
    assert process.stdout is not None
    answer = process.stdout.read().decode()
    assert process.returncode == 0, answer
    measured = json.loads(answer)
    assert measured["outcome"]["status"] == "passed", (
        f"the first frame reached the caller only once the command ended: {measured}"
    )
    assert passed["bytes"] >= mib << 20, "every frame passed through"
    assert measured["grew_kib"] < 32 * 1024, f"the wrapper grew by {measured['grew_kib']} KiB"
