"""Delivering stored events to the browsers that follow a tree: one Channels group per tree
(the consumer joins it), in the order of the tree's sequence numbers. The domain publishes
(research.events) and hands committed events to research.events.delivery, where this module
is installed at app ready (frontend/apps.py); only that, the consumer and the composition
root (asgi.py) import it.

Order. Agent threads commit in one order and run their after-commit callbacks in another, so
a tree's event 6 can be ready before its event 5. Numbers are reserved under the tree's lock
(`expect`, called by events.store), so this process knows which lower numbers are still on
their way: `_Sequencer` holds an event until every lower number it reserved has committed, or
until HOLD_SECONDS have passed (a transaction that rolled back gives its numbers back, and
they come again later under another event). Released events go to one sender, which sends
each tree's in order; the events released together (a commit's, or what queued while the
previous send ran) go in one channel-layer message, which the consumer unpacks.

Loops. The in-memory channel layer is not thread-safe: its sends must run on the ASGI
server's loop, which `serve_on_server_loop` registers when the server hands over its first
connection. With Redis's pub/sub layer (the default with Redis) a thread of its own publishes,
with a plain client and in one round trip what queued meanwhile (frontend.publisher). Any other
layer (Redis's lists), and the in-memory layer in a process without a server loop (the CLI,
tests), has the sender run a loop of its own in a daemon thread: a send to Redis is a few
round trips, and on the server's loop they queued behind every socket and page it serves.

Outages. A push that fails is sent again at once on a fresh connection, then after each of
RESEND_SECONDS: with Redis's pub/sub layer (research/settings.py) a viewer's socket stays
open while Redis is down, so the page learns what it missed only from a later push.
"""

import asyncio
import collections
import logging
import threading
import time
from typing import Any

from channels.layers import get_channel_layer

from frontend.publisher import RedisPublisher, publishes_to

log = logging.getLogger(__name__)

# How long an event waits for a lower number of its tree before it is sent anyway.
HOLD_SECONDS = 0.5
# A push that failed is sent again after each of these pauses (31 s in all).
RESEND_SECONDS = (1, 2, 4, 8, 16)


# The channel-layer message that carries a tree's events, one or several in number order;
# the consumer sends each to the browser as its own frame, so the websocket contract does
# not see it.
EVENTS_MESSAGE = "tree.events"


def group_name(root_id: int) -> str:
    return f"tree-{root_id}"


class _Sender:
    """Sends each tree's events in order, one channel-layer message per release, from a
    queue drained on `loop` (its own thread's or the server's)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop or asyncio.new_event_loop()
        self.queue: asyncio.Queue = asyncio.Queue()
        # Events handed over by other threads, moved to `queue` on the loop: one wake-up of
        # the loop takes every release made meanwhile (a writer's batch hands over one per
        # record it commits), not one wake-up each.
        self._incoming: collections.deque = collections.deque()
        self._woken = False
        self._task: asyncio.Task | None = None  # kept: the loop holds tasks only weakly
        # Pushes that failed, sent again later: each with whether Redis has taken one copy.
        self._retries: dict[asyncio.Task, asyncio.Event] = {}
        if loop is None:
            threading.Thread(target=self._run_own_loop, name="event-sender", daemon=True).start()
        else:
            loop.call_soon_threadsafe(self._start_on_loop)

    def _start_on_loop(self) -> None:
        self._task = self.loop.create_task(self._drain())

    def put(self, root_id: int, payloads: list[dict[str, Any]]) -> None:
        """Queue events of one tree, in number order, to go out together (from any thread).
        The loop is woken only when no wake-up is on its way: `_take` clears the flag before
        it empties the deque, so a put either lands before that emptying or wakes it again."""
        self._incoming.append((root_id, payloads))
        if not self._woken:
            self._woken = True
            try:
                self.loop.call_soon_threadsafe(self._take)
            except RuntimeError:  # its loop closed (a server stopping): raised, as before,
                self._incoming.pop()  # and nothing kept (puts run under the sequencer's lock)
                self._woken = False
                raise

    def _take(self) -> None:
        self._woken = False
        while self._incoming:
            self.queue.put_nowait(self._incoming.popleft())

    def _run_own_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._drain())

    async def _drain(self) -> None:
        """Hand each event to its tree's line: one tree's events go out one at a time, in
        order, while different trees' go out side by side (a send to Redis takes a few
        round trips, and one line for every tree fell seconds behind under load)."""
        lines: dict[int, collections.deque] = {}
        tasks: set[asyncio.Task] = set()
        while True:
            root_id, payloads = await self.queue.get()
            if root_id in lines:
                lines[root_id].append(payloads)
                continue
            lines[root_id] = collections.deque([payloads])
            task = asyncio.ensure_future(self._send_line(root_id, lines))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    async def _send_line(self, root_id: int, lines: dict[int, collections.deque]) -> None:
        line = lines[root_id]
        try:
            while line:
                # What queued meanwhile goes out in one message (a batch's events, in order).
                taken = len(line)
                payloads = [payload for _ in range(taken) for payload in line.popleft()]
                try:
                    layer = get_channel_layer()
                    if layer is not None:
                        await _group_send(layer, root_id, payloads)
                except Exception as error:
                    log.warning(
                        "could not push %d events of tree %s: %s; trying again later",
                        len(payloads),
                        root_id,
                        error,
                    )
                    self._later(root_id, payloads)
                finally:
                    for _ in range(taken):
                        self.queue.task_done()
        finally:
            # Whatever stopped this line (a cancelled task), the tree gets a new one next time.
            lines.pop(root_id, None)
            for _ in line:
                self.queue.task_done()

    def _later(self, root_id: int, payloads: list[dict[str, Any]]) -> None:
        taken = asyncio.Event()  # set once Redis has taken one of the copies
        task = asyncio.ensure_future(_send_later(root_id, payloads, taken))
        self._retries[task] = taken
        task.add_done_callback(lambda task: self._retries.pop(task, None))

    def flush(self, timeout: float) -> None:
        """Wait, at most `timeout` seconds, for what is queued and for the pushes that failed
        and wait to be sent again (a worker that exits takes them with it)."""
        if not self.loop.is_running():
            return
        done = asyncio.run_coroutine_threadsafe(self._settled(), self.loop)
        try:
            done.result(timeout)
        except TimeoutError:
            done.cancel()
            log.warning(
                "%d events were not pushed before the timeout, and %d failed pushes were "
                "not sent again",
                self.queue.qsize() + len(self._incoming),
                sum(not taken.is_set() for taken in self._retries.values()),
            )

    async def _settled(self) -> None:
        self._take()
        await self.queue.join()
        for task, taken in list(self._retries.items()):
            if task.done():
                continue
            waiter = asyncio.ensure_future(taken.wait())
            try:
                await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()


async def _group_send(layer, root_id: int, payloads: list[dict[str, Any]]) -> None:
    message = _message(payloads)
    try:
        await layer.group_send(group_name(root_id), message)
    except Exception as error:
        # Redis restarted: the first send on a connection it closed while idle fails, and the
        # pool opens a fresh one for the next. Once more, or the browsers, whose sockets came
        # back meanwhile, see a gap (the browser drops a copy it already has).
        log.warning("pushing events of tree %s again after: %s", root_id, error)
        await layer.group_send(group_name(root_id), message)


async def _send_later(root_id: int, payloads: list[dict[str, Any]], taken: asyncio.Event) -> None:
    """A push that failed (Redis was down), sent again after each of RESEND_SECONDS. With
    Redis's pub/sub layer a viewer's socket outlives an outage and nothing else tells its
    page what it missed: a tree that ended meanwhile would look as if it still worked. A
    PUBLISH that Redis takes reaches only the processes subscribed by then, and a web process
    subscribes again a moment after Redis is back, so the events go at every pause, not
    only until one send is taken. A page drops the copies it has; one that had a later event
    first has fetched these from the stored rows."""
    sent = False
    failure: Exception | None = None
    for delay in RESEND_SECONDS:
        await asyncio.sleep(delay)
        try:
            layer = get_channel_layer()
            if layer is not None:
                await layer.group_send(group_name(root_id), _message(payloads))
            sent = True
            taken.set()
        except Exception as error:
            failure = error
    if not sent:
        log.error("could not push %d events of tree %s: %s", len(payloads), root_id, failure)


def _message(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": EVENTS_MESSAGE, "events": payloads}


class _Sequencer:
    """Releases each tree's events in the order of their numbers (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[int, dict[int, float]] = {}  # root -> {seq: give up at}
        self.ready: dict[int, dict[int, dict[str, Any]]] = {}  # root -> {seq: payload}
        # Set while a number is pending or an event held: the sweeper sleeps when it is not.
        self.held = threading.Event()

    def expect(self, root_id: int, first: int, count: int) -> None:
        give_up_at = time.monotonic() + HOLD_SECONDS
        with self.lock:
            pending = self.pending.setdefault(root_id, {})
            for seq in range(first, first + count):
                pending[seq] = give_up_at
            self.held.set()

    def committed(self, root_id: int, payloads: list[dict[str, Any]]) -> None:
        with self.lock:
            pending = self.pending.setdefault(root_id, {})
            ready = self.ready.setdefault(root_id, {})
            for payload in payloads:
                pending.pop(payload["seq"], None)
                ready[payload["seq"]] = payload
            self.held.set()
            self._release(root_id)

    def sweep(self) -> None:
        """Send what waited too long for a number that will not come (a rollback), and
        forget numbers that never came."""
        with self.lock:
            for root_id in set(self.ready) | set(self.pending):
                self._release(root_id)

    def _release(self, root_id: int) -> None:
        # Called with the lock held, so events of all threads are queued in number order.
        now = time.monotonic()
        pending = self.pending.get(root_id, {})
        for seq, give_up_at in list(pending.items()):
            if give_up_at <= now:
                del pending[seq]
        lowest_pending = min(pending, default=None)
        ready = self.ready.get(root_id, {})
        released = []
        for seq in sorted(ready):
            if lowest_pending is not None and seq > lowest_pending:
                break
            released.append(ready.pop(seq))
        if released:
            _sender().put(root_id, released)
        if not pending:
            self.pending.pop(root_id, None)
        if not ready:
            self.ready.pop(root_id, None)
        if not self.pending and not self.ready:
            self.held.clear()

    def holding(self) -> bool:
        with self.lock:
            return bool(self.ready or self.pending)


_lock = threading.Lock()
_own_sender: _Sender | None = None
_publisher: RedisPublisher | None = None
_publishing: tuple[Any, bool] = (None, False)
_server_sender: _Sender | None = None
_sequencer = _Sequencer()
_sweeper_started = False


def _sender() -> "_Sender | RedisPublisher":
    global _own_sender, _publisher
    if _server_sender is not None and _server_sender.loop.is_running():
        return _server_sender
    if _publishes(get_channel_layer()):
        with _lock:
            if _publisher is None:
                _publisher = RedisPublisher(_envelope, resend_seconds=RESEND_SECONDS)
            return _publisher
    with _lock:
        if _own_sender is None:
            _own_sender = _Sender()
        return _own_sender


def _publishes(layer) -> bool:
    """Whether the layer's pushes go through the RedisPublisher (Redis's pub/sub layer):
    asked for every release, so the answer is kept for the layer it was given for."""
    global _publishing
    if _publishing[0] is not layer:
        _publishing = (layer, publishes_to(layer))
    return _publishing[1]


def _envelope(root_id: int, payloads: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    return group_name(root_id), _message(payloads)


def set_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    global _server_sender
    with _lock:
        if _server_sender is None or _server_sender.loop is not loop:
            _server_sender = _Sender(loop)


def serve_on_server_loop(application):
    """Wrap the ASGI application so that events go out on the server's loop.

    The loop is registered at the first scope the server hands over (daphne has no lifespan
    startup), before any consumer runs: connecting a websocket has no side effects.
    """

    async def app(scope: dict[str, Any], receive, send):
        loop = asyncio.get_running_loop()
        sender = _server_sender
        if (sender is None or sender.loop is not loop) and _layer_bound_to_loop():
            set_server_loop(loop)  # first scope, or a new server loop
        return await application(scope, receive, send)

    return app


def _layer_bound_to_loop() -> bool:
    """The in-memory layer must be sent to on the server's loop; any other (Redis) is sent to
    from the sender's own thread, off the loop that serves the sockets and pages."""
    from channels.layers import InMemoryChannelLayer

    return isinstance(get_channel_layer(), InMemoryChannelLayer)


def expect(root_id: int, first: int, count: int) -> None:
    """Numbers `first`.. of a tree were reserved in this process: later ones wait for them."""
    _start_sweeper()
    _sequencer.expect(root_id, first, count)


def broadcast(root_id: int, payloads: list[dict[str, Any]]) -> None:
    """Hand committed events of a tree to the sender, in number order (from any thread)."""
    _sequencer.committed(root_id, payloads)


def _start_sweeper() -> None:
    global _sweeper_started
    if _sweeper_started:
        return
    with _lock:
        if _sweeper_started:
            return
        _sweeper_started = True
    threading.Thread(target=_sweep_forever, name="event-order", daemon=True).start()


def _sweep_forever() -> None:
    """Look at what is held five times in HOLD_SECONDS, and sleep while nothing is: an idle
    process, or one between its batches, does not wake this thread."""
    while True:
        _sequencer.held.wait()
        time.sleep(HOLD_SECONDS / 5)
        _sequencer.sweep()


def flush(timeout: float = 5.0) -> None:
    """Wait until this process's pending pushes are sent (a worker about to exit)."""
    deadline = time.monotonic() + timeout
    while _sequencer.holding() and time.monotonic() < deadline:
        _sequencer.sweep()
        time.sleep(0.05)
    for sender in (_own_sender, _server_sender, _publisher):
        if sender is not None:
            sender.flush(max(0.0, deadline - time.monotonic()))
