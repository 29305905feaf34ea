"""Events: stored with a per-tree sequence number, pushed to the tree's group after commit.

The database is the source of truth; the websocket only tells browsers what changed, and a
browser that missed something asks for the events after the last number it saw.
"""

import asyncio
import logging
import threading
from typing import Any

from channels.layers import get_channel_layer
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from research.models import Event, Run

log = logging.getLogger(__name__)

EVENT_TYPES = ("run.created", "run.state", "run.usage", "run.message", "run.finished", "run.report")

_server_loop: asyncio.AbstractEventLoop | None = None
_server_loop_lock = threading.Lock()


def group_name(root_id: int) -> str:
    return f"tree-{root_id}"


def set_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Remember the ASGI server's event loop (called by the websocket consumer).

    The in-memory channel layer is not thread-safe: a group_send from an agent thread through
    async_to_sync runs on another loop and reaches consumers late or not at all. Sends are
    handed to the server's own loop instead.
    """
    global _server_loop
    with _server_loop_lock:
        _server_loop = loop


def root_id_of(run_id: int) -> int | None:
    """The root of a run's tree; None when the run is gone."""
    return Run.objects.filter(pk=run_id).values_list("root_id", flat=True).first()


def tree_lock(*, root_id: int) -> None:
    """Take the tree's write lock (its root row) until the caller's transaction ends.

    Every write of a tree ends in publish(), which updates the root's counter. A service that
    also updates other rows of the tree (the run, its ancestors' costs) must lock the root
    first: otherwise a grandchild's usage (its row, then the root, then its parent) and its
    parent's state change (its row, then the root) take the same locks in opposite orders,
    and PostgreSQL kills one of them as a deadlock. FOR NO KEY UPDATE is the lock a plain
    UPDATE takes, so it does not block inserts that reference the run (states, steps, calls).
    """
    Run.objects.select_for_update(no_key=True).filter(pk=root_id).values_list("pk").first()


def publish(*, root_id: int, type: str, run_id: int, **data: Any) -> Event:
    """Store an event of the tree and push it to the tree's group once the transaction commits.

    The counter on the root row is incremented in the caller's transaction: on PostgreSQL the
    row lock orders concurrent publishers, so sequence numbers commit in order.
    """
    assert type in EVENT_TYPES, type
    with transaction.atomic():
        Run.objects.filter(pk=root_id).update(event_seq=F("event_seq") + 1)
        seq = Run.objects.filter(pk=root_id).values_list("event_seq", flat=True).get()
        at = timezone.now()
        payload = {"seq": seq, "type": type, "run": run_id, "at": at.isoformat(), **data}
        event = Event.objects.create(root_id=root_id, seq=seq, type=type, payload=payload, at=at)
        transaction.on_commit(lambda: broadcast(root_id, payload))
    return event


def broadcast(root_id: int, payload: dict) -> None:
    """Send one event to the tree's group, from any thread, without waiting for it."""
    layer = get_channel_layer()
    if layer is None:
        return
    send = layer.group_send(group_name(root_id), {**payload, "type": payload["type"]})
    loop = _server_loop
    if loop is not None and loop.is_running():
        future = asyncio.run_coroutine_threadsafe(send, loop)
        future.add_done_callback(lambda done: _log_failure(done, root_id, payload))
    else:
        _sender().put(root_id, payload, send)


def _log_failure(done, root_id: int, payload: dict) -> None:
    # A dropped push is recovered by the browser from the stored events.
    if not done.cancelled() and done.exception() is not None:
        log.error(
            "could not push event %s of tree %s: %s", payload["seq"], root_id, done.exception()
        )


class _Sender:
    """One event loop in a daemon thread that sends this process's events in order.

    Without a server loop (a runagents worker, the CLI, tests), async_to_sync per event
    would build a new loop, and with channels-redis a new connection, for every event.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.queue: asyncio.Queue = asyncio.Queue()
        threading.Thread(target=self._run, name="event-sender", daemon=True).start()

    def put(self, root_id: int, payload: dict, send) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (root_id, payload, send))

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._drain())

    async def _drain(self) -> None:
        while True:
            root_id, payload, send = await self.queue.get()
            try:
                await send
            except Exception as error:  # the browser recovers it from the stored rows
                log.error("could not push event %s of tree %s: %s", payload["seq"], root_id, error)
            finally:
                self.queue.task_done()

    def flush(self, timeout: float) -> None:
        done = asyncio.run_coroutine_threadsafe(self.queue.join(), self.loop)
        try:
            done.result(timeout)
        except TimeoutError:
            log.warning("%d events were not pushed before the timeout", self.queue.qsize())


_sender_instance: _Sender | None = None


def flush(timeout: float = 5.0) -> None:
    """Wait until this process's pending pushes are sent (a worker about to exit)."""
    if _sender_instance is not None:
        _sender_instance.flush(timeout)


def _sender() -> _Sender:
    global _sender_instance
    with _server_loop_lock:
        if _sender_instance is None:
            _sender_instance = _Sender()
        return _sender_instance
