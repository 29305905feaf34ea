"""The threads in which the MCP edge does its synchronous work (the ORM): daemon threads.

Not `anyio.to_thread`: its worker threads are not daemon threads, and each stays alive until
the task at the top of its anyio task tree ends. Over a handshake-era session (initialize,
then a session id) that task is the SDK's session manager, which lives as long as the
server's loop; at exit Python joins non-daemon threads before it runs the atexit handlers,
so daphne waited forever on an idle worker, the agent pool's shutdown (atexit) never ran, and
the half-stopped process kept heartbeating and claiming researches. Not the loop's default
executor either: Python joins its threads at exit too, and a query waiting on a lock would
hold the stop up. A daemon thread is never waited for: a call in flight when the process
stops is abandoned with the request it serves (PostgreSQL rolls its transaction back).
"""

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# As many calls at once as anyio's default limit allowed; each thread keeps a connection
# (given back to the pool, with PostgreSQL's, by the callers' close_old_connections()).
MAX_THREADS = 40


class DaemonThreads:
    """A thread pool whose threads are daemon threads, started as calls need them."""

    def __init__(self, *, name: str, max_threads: int = MAX_THREADS):
        self.name = name
        self.max_threads = max_threads
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one release per thread waiting for a job
        self._lock = threading.Lock()
        self._started = 0

    def submit(self, work: Callable[[], T]) -> "concurrent.futures.Future[T]":
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((work, future))
        if not self._idle.acquire(blocking=False):
            with self._lock:
                if self._started < self.max_threads:
                    self._started += 1
                    threading.Thread(
                        target=self._serve, name=f"{self.name}-{self._started}", daemon=True
                    ).start()
        return future

    def _serve(self) -> None:
        while True:
            work, future = self._jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(work())
                except BaseException as error:  # the caller's to handle, in its task
                    future.set_exception(error)
            del work, future  # not kept alive while this thread waits
            self._idle.release()


_threads = DaemonThreads(name="mcp-sync")


async def run_sync(work: Callable[[], T]) -> T:
    """`work()` in one of the MCP edge's daemon threads; a cancelled caller stops waiting
    (a call not started yet never runs)."""
    return await asyncio.wrap_future(_threads.submit(work))
