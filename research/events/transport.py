"""Pushing stored events to the browsers that follow a tree: one Channels group per tree.

The in-memory channel layer is not thread-safe: a group_send from an agent thread through
async_to_sync runs on another loop and reaches consumers late or not at all. In the web
process, sends are handed to the ASGI server's own loop, which `serve_on_server_loop`
registers when the server starts handling connections. Without a server loop (a runagents
worker, the CLI, tests) one sender thread with a loop of its own sends this process's events.
"""

import asyncio
import logging
import threading
from typing import Any

from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

_server_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def group_name(root_id: int) -> str:
    return f"tree-{root_id}"


def set_server_loop(loop: asyncio.AbstractEventLoop | None) -> None:
    global _server_loop
    with _lock:
        _server_loop = loop


def serve_on_server_loop(application):
    """Wrap the ASGI application so that events go out on the server's loop.

    The loop is registered at the first scope the server hands over (daphne has no lifespan
    startup), before any consumer runs: connecting a websocket no longer has side effects.
    """

    async def app(scope: dict[str, Any], receive, send):
        loop = asyncio.get_running_loop()
        if _server_loop is not loop:  # the first scope, or a server restarted on a new loop
            set_server_loop(loop)
        return await application(scope, receive, send)

    return app


def broadcast(root_id: int, payload: dict[str, Any]) -> None:
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


def _log_failure(done, root_id: int, payload: dict[str, Any]) -> None:
    # A dropped push is recovered by the browser from the stored events.
    if not done.cancelled() and done.exception() is not None:
        log.error(
            "could not push event %s of tree %s: %s", payload["seq"], root_id, done.exception()
        )


class _Sender:
    """One event loop in a daemon thread that sends this process's events in order.

    Without it, async_to_sync per event would build a new loop, and with channels-redis a new
    connection, for every event.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.queue: asyncio.Queue = asyncio.Queue()
        threading.Thread(target=self._run, name="event-sender", daemon=True).start()

    def put(self, root_id: int, payload: dict[str, Any], send) -> None:
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
    with _lock:
        if _sender_instance is None:
            _sender_instance = _Sender()
        return _sender_instance
