"""One process per rank for the oracle workers that run a real engine over Gloo on CPU
(zero_worker.py, zero3_fetch_worker.py, fsdp1_param_wrapper_worker.py).

The worker imports torch, transformers and the engine once, then forks each plan's ranks from
itself: an import costs seconds, a fork nothing. A rank that hangs in a collective is killed at the
deadline: a hang is what the oracle observes, not a failure of the oracle.
"""
import os
import signal
import socket
import sys
import time
import traceback


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world_size, log_path, run_rank, deadline_s):
    """Runs run_rank(rank) in a forked process per rank, its stdout and stderr in log_path(rank),
    and waits up to deadline_s seconds. Returns the ranks killed at the deadline."""
    children = {}
    for rank in range(world_size):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                log = os.open(log_path(rank), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(log, 1)
                os.dup2(log, 2)
                run_rank(rank)
            except BaseException:  # noqa: BLE001 - the traceback goes to the rank's log
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            # A rank that raised leaves the others in a collective; no shutdown handshake.
            os._exit(code)
        children[pid] = rank
    deadline = time.monotonic() + deadline_s
    while children and time.monotonic() < deadline:
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.05)
        elif pid in children:
            del children[pid]
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return sorted(children.values())
