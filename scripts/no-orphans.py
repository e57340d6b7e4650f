#!/usr/bin/env python3
"""Runs a command as the child subreaper of everything it starts, and fails when anything it
started outlives it.

    scripts/no-orphans.py CMD [ARGS...]

A process whose parent dies is re-parented to the nearest subreaper instead of init, so every
process the command left behind — a hung fake nvidia-smi, a daemon a test forgot, a grandchild
that escaped with setsid — becomes a child of this script. When the command has exited, such
children get 5 s to exit on their own; any still running are listed with their command lines,
killed (they are this script's own children, so their pids cannot have been reused) and reaped,
and the exit status is 1 if the command itself succeeded. `.ci/run` runs itself under it.
"""
import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
GRACE_SECONDS = 5.0


def children():
    """Our children still running (zombies are reaped, not listed)."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields follow the last ')'.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == me and fields[0] != "Z":
            found.append(int(entry))
    return found


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def reap():
    """Reaps every child that has exited, without waiting."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main():
    command = sys.argv[1:]
    if not command:
        print("usage: no-orphans.py CMD [ARGS...]", file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("no-orphans: cannot become a subreaper; running without the check", file=sys.stderr)
        os.execvp(command[0], command)
    os.environ["UNILAB_NO_ORPHANS"] = "1"
    child = os.fork()
    if child == 0:
        try:
            os.execvp(command[0], command)
        finally:
            os._exit(127)
    # Orphans re-parented to us are reaped as they exit; the command's own status is kept.
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            code = code if code >= 0 else 128 - code  # killed by a signal: 128 + its number
            break
    deadline = time.monotonic() + GRACE_SECONDS
    while True:
        reap()
        left = children()
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if not left:
        return code
    print(f"no-orphans: {len(left)} process(es) outlived `{' '.join(command)}`:", file=sys.stderr)
    for pid in left:
        print(f"  pid {pid}: {cmdline(pid)}", file=sys.stderr)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(0.2)
    reap()
    return code if code != 0 else 1


if __name__ == "__main__":
    sys.exit(main())
