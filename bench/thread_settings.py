"""research.settings, plus each thread's CPU time and context switches by what the thread is,
for `bench/research_cpu.py --threads`.

The benchmark starts daphne with DJANGO_SETTINGS_MODULE=thread_settings (bench/ on the path)
and CANOPY_THREAD_CPU_LOG=<file>. Every thread's CPU time (user + system, from the thread's own
clock) is summed by its role: its name without numbers ("agent-12" is "agent"), the CPU of
threads that have ended included. Each role's context switches are summed the same way, from
the kernel's count for each thread (/proc, voluntary and not): a thread that blocks, on a
socket, a lock or the GIL, switches once each time. On SIGUSR1 the process writes the sums so
far to that file as JSON, and the benchmark takes the difference across a research. The roles
in a research:

- MainThread: daphne's event loop (HTTP requests, websockets, the pushes of events to them);
- agent: the agents' own threads (model calls, acting tools, each agent's start and end);
- tool: the threads that run an agent's reading tools in parallel (search, pages);
- step-writer: the process's writer (research.services.writer);
- ThreadPoolExecutor, asyncio: the threads where the server runs its sync code (views,
  the consumers' reads);
- pool-*: the agent pool's claim loop, heartbeat and cancel watch.
"""

import json
import os
import re
import signal
import threading
import time
from collections import Counter

from research.settings import *  # noqa: F403

_LOG = os.environ.get("CANOPY_THREAD_CPU_LOG")
_ended: Counter[str] = Counter()
_ended_switches: Counter[str] = Counter()
_lock = threading.Lock()


def role(name: str) -> str:
    return re.sub(r"[-_]?\d+", "", name) or name


def _counted(run):
    def counted(self) -> None:
        try:
            run(self)
        finally:
            switched = switches("thread-self")
            with _lock:
                _ended[role(self.name)] += time.thread_time()
                _ended_switches[role(self.name)] += switched

    return counted


def switches(task: str) -> int:
    """A thread's context switches so far, voluntary and not (`task`: its /proc entry)."""
    try:
        with open(f"/proc/{task}/status") as file:
            return sum(int(line.split()[1]) for line in file if "ctxt_switches" in line)
    except OSError:  # it ended meanwhile (and was counted)
        return 0


def sums() -> dict[str, dict[str, float]]:
    """By role, CPU seconds and context switches: the threads ended, and those alive by their
    own clocks and counts."""
    with _lock:
        totals, switched = Counter(_ended), Counter(_ended_switches)
    for thread in threading.enumerate():
        try:
            clock = time.pthread_getcpuclockid(thread.ident)
            totals[role(thread.name)] += time.clock_gettime(clock)
        except (OSError, TypeError):  # it ended meanwhile (and was counted) or never started
            continue
        switched[role(thread.name)] += switches(f"self/task/{thread.native_id}")
    return {"cpu": dict(totals), "switches": dict(switched)}


def _write(signum, frame) -> None:
    path = f"{_LOG}.part"
    with open(path, "w") as file:
        json.dump(sums(), file)
    os.replace(path, _LOG)


if _LOG:
    threading.Thread.run = _counted(threading.Thread.run)
    signal.signal(signal.SIGUSR1, _write)
