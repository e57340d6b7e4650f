#!/usr/bin/env python3
"""Races and crashes around `unilab mps start/stop`, counted: run it against two builds to
compare them side by side.

    scripts/mps-races.py [--bin target/release/unilab] [--rounds 20] [--n 4] [--ranks 12]

On a throw-away host (the bundled fake nvidia-smi with two GPUs and the fake MPS control
daemon, a private runtime directory and state root) it runs, `--rounds` times each:

- same name: N concurrent `mps start 0 --name cc`; a round is bad unless exactly one start
  succeeded, one daemon runs and one record names it;
- same GPU: N concurrent `mps start 0 --name cI`; bad unless exactly one daemon runs;
- stops: N concurrent `mps stop cc` of one daemon; bad unless exactly one `daemon_stopped`;
- crash: `mps start 0` SIGKILLed at a varied moment (the daemon taking a varied time to come
  up), then `mps stop --all`; bad if a daemon runs with no record once the start is dead, and
  counted apart if it still runs after the stop.
- killed starter: `--ranks` concurrent `mps exec --shared 0 -- sleep 0.2` (daemons and
  launchers of varied speed), a third of them SIGKILLed at random moments — starters among
  them, mid-launch — then `mps stop --all` as a job's epilog would; a round is bad if a rank
  that was not killed exits non-zero, two daemons serve at once, a daemon runs that no record
  names, or one outlives the epilog.

Daemons are found by their environment (the pipe directory) and command line; whatever a round
leaves is killed by pid before the next. Prints one line per scenario: rounds, bad rounds.
"""
import argparse
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
GPUS = ("GPU-1111aaaa-0000-4000-8000-000000000001|NVIDIA H200|143771|0|0;"
        "GPU-2222bbbb-0000-4000-8000-000000000002|NVIDIA H200|143771|0|0")


class Host:
    def __init__(self, binary):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="unilab-races-"))
        self.run_dir = self.dir / "run"
        self.run_dir.mkdir(mode=0o700)
        self.binary = binary
        self.env = {
            "PATH": f"{REPO / 'tests/fixtures'}:{os.environ['PATH']}",
            "HOME": str(self.dir),
            "FAKE_NVIDIA_SMI_GPUS": GPUS,
            "XDG_RUNTIME_DIR": str(self.run_dir),
            "UNILAB_TOOL_TIMEOUT": "5",
        }

    def cmd(self, *args):
        return [self.binary, "--root", str(self.dir), *args]

    def run(self, *args, env=None):
        return subprocess.run(self.cmd(*args), env={**self.env, **(env or {})},
                              capture_output=True, text=True)

    def at_once(self, argsets):
        codes = [None] * len(argsets)
        barrier = threading.Barrier(len(argsets))

        def go(i, args):
            barrier.wait()
            codes[i] = self.run(*args).returncode

        threads = [threading.Thread(target=go, args=(i, a)) for i, a in enumerate(argsets)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return codes

    def records(self):
        out = self.run("--json", "mps", "list")
        try:
            return json.loads(out.stdout) if out.stdout.strip() else []
        except json.JSONDecodeError:
            return []

    def kinds(self, name):
        out = self.run("--json", "history", "--daemon", name)
        return [json.loads(line)["kind"] for line in out.stdout.splitlines() if line.strip()]

    def daemons(self):
        """Live fake control processes whose pipe directory is under this host's."""
        marker = f"CUDA_MPS_PIPE_DIRECTORY={self.run_dir}/".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                if stat[stat.rfind(")") + 2] == "Z":
                    continue
                with open(f"/proc/{entry}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if b"nvidia-cuda-mps-control" in cmdline and any(e.startswith(marker) for e in environ):
                found.append(int(entry))
        return found

    def clean(self):
        self.run("mps", "stop", "--all", "--grace", "0.5")
        for pid in self.daemons():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)

    def close(self):
        self.clean()
        shutil.rmtree(self.dir, ignore_errors=True)


def same_name(host, n):
    codes = host.at_once([("mps", "start", "0", "--name", "cc")] * n)
    time.sleep(0.3)
    ok = codes.count(0) == 1 and len(host.daemons()) == 1 and len(host.records()) == 1
    host.clean()
    return ok


def same_gpu(host, n):
    host.at_once([("mps", "start", "0", "--name", f"c{i}") for i in range(n)])
    time.sleep(0.3)
    ok = len(host.daemons()) == 1
    host.clean()
    return ok


def stops(host, n):
    host.run("mps", "start", "0", "--name", "cc")
    before = host.kinds("cc").count("daemon_stopped")
    host.at_once([("mps", "stop", "cc", "--grace", "0.5")] * n)
    ok = host.kinds("cc").count("daemon_stopped") - before == 1
    host.clean()
    return ok


def crash(host, round_):
    delay = round_ % 4 / 10
    start = subprocess.Popen(host.cmd("mps", "start", "0"),
                             env={**host.env, "FAKE_MPS_START_DELAY": str(delay)},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(random.uniform(0, 0.7))
    start.kill()
    start.wait()
    time.sleep(delay + 0.5)  # a daemon still coming up has come up by now
    orphan = bool(host.daemons()) and not host.records()
    host.run("mps", "stop", "--all", "--grace", "0.5")
    time.sleep(0.3)
    survived = bool(host.daemons())
    host.clean()
    return orphan, survived


def serving(directory):
    """Daemons serving now: the fake marks each that bound its socket (FAKE_MPS_SERVING_DIR)."""
    live = []
    for entry in os.listdir(directory):
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2] != "Z":
            live.append(int(entry))
    return live


def killed_starter(host, ranks):
    marks = host.dir / "serving"
    marks.mkdir(exist_ok=True)
    for mark in marks.iterdir():
        mark.unlink()
    most = [0]
    done = threading.Event()

    def watch():
        while not done.is_set():
            most[0] = max(most[0], len(serving(marks)))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    runs = []
    for _ in range(ranks):
        env = {**host.env, "FAKE_MPS_SERVING_DIR": str(marks),
               "FAKE_MPS_START_DELAY": str(random.randrange(7) / 10),
               "FAKE_MPS_LAUNCH_DELAY": str(random.randrange(2) * random.randrange(6) / 10)}
        runs.append(subprocess.Popen(
            host.cmd("mps", "exec", "--shared", "0", "--", "sleep", "0.2"), env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    began = time.monotonic()
    killed = set()
    for at, rank in sorted((random.uniform(0, 1.5), random.randrange(ranks))
                           for _ in range(ranks // 3)):
        time.sleep(max(0.0, began + at - time.monotonic()))
        if runs[rank].poll() is None:
            runs[rank].kill()
            killed.add(rank)
    failed = sum(run.wait() != 0 and rank not in killed for rank, run in enumerate(runs))
    done.set()
    watcher.join()
    recorded = {record["pid"] for record in host.records()}
    orphans = sum(pid not in recorded for pid in serving(marks))
    host.run("mps", "stop", "--all")
    time.sleep(0.5)
    survived = len(serving(marks))
    host.clean()
    return failed, most[0] > 1, orphans, survived


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=str(REPO / "target/release/unilab"))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--ranks", type=int, default=12)
    parser.add_argument("--only", choices=["killed-starter"],
                        help="run this scenario alone")
    args = parser.parse_args()
    random.seed(1)
    host = Host(args.bin)
    try:
        if args.only == "killed-starter":
            return report_killed_starter(host, args)
        for name, scenario in (("same name", same_name), ("same GPU", same_gpu), ("stops", stops)):
            bad = sum(not scenario(host, args.n) for _ in range(args.rounds))
            print(f"{name:<10} N={args.n}: {bad}/{args.rounds} rounds bad")
            sys.stdout.flush()
        results = [crash(host, r) for r in range(args.rounds)]
        orphans = sum(o for o, _ in results)
        survived = sum(s for _, s in results)
        print(f"crash      : {orphans}/{args.rounds} kills left a daemon with no record; "
              f"{survived}/{args.rounds} still ran after `mps stop --all`")
        sys.stdout.flush()
        report_killed_starter(host, args)
    finally:
        host.close()


def report_killed_starter(host, args):
    results = [killed_starter(host, args.ranks) for _ in range(args.rounds)]
    bad = sum(f > 0 or two or o > 0 or s > 0 for f, two, o, s in results)
    print(f"killed starter, {args.ranks} ranks: {bad}/{args.rounds} rounds bad "
          f"({sum(r[0] for r in results)} of {args.rounds * args.ranks} ranks failed that were "
          f"not killed, {sum(r[1] for r in results)} rounds with two daemons at once, "
          f"{sum(r[2] for r in results)} daemons with no record, "
          f"{sum(r[3] for r in results)} outlived `mps stop --all`)")


if __name__ == "__main__":
    main()
