#!/usr/bin/env python3
"""A small stand-in for a training job, for unilab's quick start and tests.

It "trains" for --steps steps of --step-seconds each, writing a checkpoint file into the progress
directory every --checkpoint-every steps and a line of loss to stdout every step. Behaviours for
tests, chosen by flags:
  --hang-after N        stop making progress after step N (keep running: the main thread waits
                        for a thread stuck in wait_for_allreduce(), as a rank in a collective)
  --exit-code C         exit with C at the end
  --leak                start a grandchild that escapes with setsid and outlives the trainer
  --ignore-sigterm      ignore SIGTERM
  --no-progress         never write to the progress directory
  --children K          keep K child processes alive while training (a process tree)
  --print-env NAME      print NAME=<value of the variable> first (without flushing; repeatable)
  --burn-child SECONDS  first run a child process that burns SECONDS of CPU time and exits
  --gpu-memory MIB      "use" MIB of GPU memory: with FAKE_NVIDIA_SMI_APPS_FILE set (tests), list
                        itself there as a compute process of the fake nvidia-smi's first GPU
  --python-worker       keep a Python worker process alive, blocked reading a pipe
  --faulthandler        print every thread's stack on SIGUSR1 (Python's faulthandler)
  --fail-child CODE     start a worker that exits with CODE at once, and never reap it
  --allocate-mib N      after the first checkpoint, allocate and touch N MiB of memory
  --grow-mib N          allocate and touch N MiB more at every step (a leak) ...
  --grow-steps K        ... for the first K steps only (then it plateaus)
  --noisy-mib N         hold between 1 and N MiB, drawn afresh at every step: memory that moves
                        at random around a flat mean (batches of different sizes)
  --shared-mib N        allocate N MiB first, then fork the --fork-workers, which share it
  --fork-workers K      fork K workers that keep a copy-on-write view of the parent's memory
"""
import argparse
import faulthandler
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--progress-dir", required=True)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--step-seconds", type=float, default=0.25)
parser.add_argument("--checkpoint-every", type=int, default=2)
parser.add_argument("--hang-after", type=int, default=None)
parser.add_argument("--exit-code", type=int, default=0)
parser.add_argument("--leak", action="store_true")
parser.add_argument("--ignore-sigterm", action="store_true")
parser.add_argument("--no-progress", action="store_true")
parser.add_argument("--children", type=int, default=0)
parser.add_argument("--print-env", action="append", default=[])
parser.add_argument("--gpu-memory", type=int, default=None)
parser.add_argument("--burn-child", type=float, default=None)
parser.add_argument("--python-worker", action="store_true")
parser.add_argument("--faulthandler", action="store_true")
parser.add_argument("--fail-child", type=int, default=None)
parser.add_argument("--allocate-mib", type=int, default=None)
parser.add_argument("--grow-mib", type=float, default=0)
parser.add_argument("--grow-steps", type=int, default=None)
parser.add_argument("--noisy-mib", type=int, default=0)
parser.add_argument("--shared-mib", type=int, default=0)
parser.add_argument("--fork-workers", type=int, default=0)
args = parser.parse_args()

if args.burn_child is not None:
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < %f: pass\n"
    subprocess.run([sys.executable, "-c", burn % args.burn_child], check=True)

if args.gpu_memory is not None and os.environ.get("FAKE_NVIDIA_SMI_APPS_FILE"):
    uuid = "GPU-0f8e0c2a-5b5e-4c47-9d0a-1a2b3c4d5e6f"
    with open(os.environ["FAKE_NVIDIA_SMI_APPS_FILE"], "w") as f:
        f.write(f"{os.getpid()}|python3|{args.gpu_memory}|{uuid}\n")

for name in args.print_env:
    print(f"{name}={os.environ.get(name)}")

if args.ignore_sigterm:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if args.leak:
    subprocess.Popen(["sleep", "600"], start_new_session=True)
children = [subprocess.Popen(["sleep", "600"]) for _ in range(args.children)]
if args.python_worker:
    worker = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                              stdin=subprocess.PIPE)
    children.append(worker)
if args.faulthandler:
    faulthandler.register(signal.SIGUSR1, all_threads=True)
if args.fail_child is not None:
    # Never waited for: it stays a zombie, as a rank whose launcher does not look.
    failing = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({args.fail_child})"])
allocated = []
grown = []
noise = random.Random(0)
noisy = None
shared = bytearray(args.shared_mib << 20)  # zero-filled: every page touched
forked = []
for _ in range(args.fork_workers):
    pid = os.fork()
    if pid == 0:
        # A worker: the parent's pages, shared until written; it writes none.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        while True:
            time.sleep(60)
    forked.append(pid)


def wait_for_allreduce():
    """Stands for a collective that never completes: blocks forever."""
    try:  # Named for the OS too, as frameworks name their threads (Python 3.14 does it itself).
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write("allreduce")
    except OSError:
        pass
    threading.Event().wait()

os.makedirs(args.progress_dir, exist_ok=True)
for step in range(1, args.steps + 1):
    time.sleep(args.step_seconds)
    loss = 2.0 * math.exp(-step / 10)
    print(f"step {step}/{args.steps} loss {loss:.4f}", flush=True)
    if args.hang_after is not None and step >= args.hang_after:
        print("stuck in a collective that never completes", file=sys.stderr, flush=True)
        collective = threading.Thread(target=wait_for_allreduce, name="allreduce")
        collective.start()
        collective.join()
    if not args.no_progress and step % args.checkpoint_every == 0:
        path = os.path.join(args.progress_dir, f"checkpoint-{step:06d}.txt")
        with open(path, "w") as f:
            f.write(f"step={step} loss={loss:.6f}\n")
    if args.grow_mib and (args.grow_steps is None or step <= args.grow_steps):
        grown.append(bytearray(int(args.grow_mib * (1 << 20))))
    if args.noisy_mib:
        noisy = None  # freed first: the memory moves, its mean does not
        noisy = bytearray(noise.randint(1, args.noisy_mib) << 20)  # zero-filled: touched
    if args.allocate_mib is not None and not allocated and step >= args.checkpoint_every:
        for _ in range(args.allocate_mib):
            allocated.append(bytearray(1 << 20))  # zero-filled: every page touched

for child in children:
    child.kill()
    child.wait()
for pid in forked:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
sys.exit(args.exit_code)
