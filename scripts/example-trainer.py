#!/usr/bin/env python3
"""A small stand-in for a training job, for unilab's quick start and tests.

It "trains" for --steps steps of --step-seconds each, writing a checkpoint file into the progress
directory every --checkpoint-every steps and a line of loss to stdout every step. Behaviours for
tests, chosen by flags:
  --hang-after N        stop making progress after step N (keep running)
  --exit-code C         exit with C at the end
  --leak                start a grandchild that escapes with setsid and outlives the trainer
  --ignore-sigterm      ignore SIGTERM
  --no-progress         never write to the progress directory
  --children K          keep K child processes alive while training (a process tree)
  --print-env NAME      print NAME=<value of the variable> first (without flushing; repeatable)
  --burn-child SECONDS  first run a child process that burns SECONDS of CPU time and exits
  --gpu-memory MIB      "use" MIB of GPU memory: with FAKE_NVIDIA_SMI_APPS_FILE set (tests), list
                        itself there as a compute process of the fake nvidia-smi's first GPU
"""
import argparse
import math
import os
import signal
import subprocess
import sys
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

os.makedirs(args.progress_dir, exist_ok=True)
for step in range(1, args.steps + 1):
    time.sleep(args.step_seconds)
    loss = 2.0 * math.exp(-step / 10)
    print(f"step {step}/{args.steps} loss {loss:.4f}", flush=True)
    if args.hang_after is not None and step >= args.hang_after:
        print("stuck in a collective that never completes", file=sys.stderr, flush=True)
        while True:
            time.sleep(1)
    if not args.no_progress and step % args.checkpoint_every == 0:
        path = os.path.join(args.progress_dir, f"checkpoint-{step:06d}.txt")
        with open(path, "w") as f:
            f.write(f"step={step} loss={loss:.6f}\n")

for child in children:
    child.kill()
    child.wait()
sys.exit(args.exit_code)
