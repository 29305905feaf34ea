"""The gate on agents running Canopy's own Python.

Of the agents with a slot (agents.runtime.pool), those running Canopy's own Python rather
than waiting on their model or their tools pass this gate, RESEARCH_AGENT_CPU_SLOTS at a
time. Python runs one thread at a time: with hundreds of runnable threads, the server's loop
(handshakes, events, pages) waited seconds for its turn. Holders are never inside a
transaction when they wait for it.
"""

import threading

from research.sql import give_back_connection


class CpuGate:
    def __init__(self, size: int) -> None:
        self._places = threading.BoundedSemaphore(size)
        self._holds = threading.local()

    # A thread holds the gate once at most: a wait (yielded) inside a tool call (blocking)
    # finds it already given back.
    def acquire(self) -> None:
        if not getattr(self._holds, "held", False):
            if not self._places.acquire(blocking=False):
                give_back_connection()  # a thread waiting its turn needs none meanwhile
                self._places.acquire()
            self._holds.held = True

    def release(self) -> bool:
        """Give the gate back; False when this thread did not hold it."""
        if getattr(self._holds, "held", False):
            self._holds.held = False
            self._places.release()
            return True
        return False
