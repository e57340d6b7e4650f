#!/usr/bin/env python3
"""A tree of sleeping processes for the supervisor's cost benchmark.

`sleeping_tree.py PROCESSES SECONDS PROGRESS_DIR`: the first process forks PROCESSES - 1
children that sleep, and appends a line to PROGRESS_DIR/log every half second (an in-place
append, the commonest progress) until SECONDS have passed; then all exit 0. The tree itself
costs next to nothing, so what a soak over it costs is the supervisor's.
"""

import os
import signal
import sys
import time

processes, seconds, progress = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
children = []
for _ in range(processes - 1):
    pid = os.fork()
    if pid == 0:
        time.sleep(seconds + 5)
        os._exit(0)
    children.append(pid)
end = time.monotonic() + seconds
with open(os.path.join(progress, "log"), "a") as log:
    step = 0
    while time.monotonic() < end:
        step += 1
        log.write(f"step {step}\n")
        log.flush()
        time.sleep(0.5)
for pid in children:
    os.kill(pid, signal.SIGTERM)
for pid in children:
    os.waitpid(pid, 0)
