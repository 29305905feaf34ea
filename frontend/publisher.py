"""Pushing a process's events through Redis's pub/sub layer: one thread, a plain Redis client,
and every release that queued meanwhile in one round trip.

channels_redis's own `group_send` is one PUBLISH through redis-py's asyncio client, so the
sender ran an event loop of its own and, for every release of every tree, paid a command's
awaits, a connection taken from the pool and given back, and a reply parsed: 0.22 ms of the
web process's CPU per model call at 198 agents (bench/served.py's trees), on a thread that
woke for each release and took the GIL from the agents each time. Here a wake-up takes every
release queued meanwhile, joins each tree's into one message in number order, and publishes
them all in one pipeline.

What goes on the wire is what the layer's `group_send` sends (its serializer, its group's
channel, the shard it hashes to), so every process that follows the tree, this one
included, receives it through the layer as before. `tests/test_events.py` listens through
the layer, so a channels_redis that named its channels otherwise fails there.

Outages keep frontend.delivery's rules: a push that fails is sent again at once on a fresh
connection, then after each of the resend pauses, at every pause (a web process subscribes
again a moment after Redis is back, and a PUBLISH reaches only the subscribers it has then).
`flush` waits for the queue, and until each failed push was taken once. An outage is two
lines of the log (pushes fail; Redis takes them again), not one for every release and try.
"""

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import redis
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from channels_redis.utils import _consistent_hash, decode_hosts

log = logging.getLogger(__name__)

# (group, message) for a tree's events, in number order: frontend.delivery's.
Envelope = Callable[[int, list[dict[str, Any]]], tuple[str, dict[str, Any]]]


def publishes_to(layer: Any) -> bool:
    """Whether this publisher sends for `layer`: the pub/sub layer on plain addresses (a
    sentinel's keeps the layer's own group_send)."""
    return isinstance(layer, RedisPubSubChannelLayer) and _hosts(layer) is not None


class RedisPublisher:
    def __init__(self, envelope: Envelope, *, resend_seconds: tuple[float, ...]) -> None:
        self._envelope = envelope
        self._resend = resend_seconds
        self._layer: Any = None
        self._clients: list[redis.Redis | None] = []
        self._incoming: deque = deque()
        self._woken = threading.Event()
        self._settled = threading.Condition()
        self._busy = False
        # Failed pushes, sent again: (due, id, messages, pauses left); `_untaken` holds the
        # ids of those Redis has taken no copy of yet.
        self._later: list[tuple[float, int, list[tuple[str, bytes]], tuple[float, ...]]] = []
        self._ids = itertools.count()
        self._untaken: set[int] = set()
        # Events whose push failed since Redis last took one, and why (see _report).
        self._failed_events = 0
        self._given_up = 0
        self._failure: Exception | None = None
        threading.Thread(target=self._run, name="event-publisher", daemon=True).start()

    def put(self, root_id: int, payloads: list[dict[str, Any]]) -> None:
        """Queue events of one tree, in number order (from any thread; never blocks)."""
        self._incoming.append((root_id, payloads))
        self._woken.set()

    def flush(self, timeout: float) -> None:
        """Wait, at most `timeout` seconds, until what is queued is sent and every failed
        push was taken once."""
        with self._settled:
            settled = self._settled.wait_for(
                lambda: not (self._incoming or self._busy or self._untaken), timeout
            )
        if not settled:
            log.warning(
                "%d releases of events were not pushed before the timeout, and %d failed "
                "pushes were not taken by Redis",
                len(self._incoming),
                len(self._untaken),
            )

    # --- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            due = self._later[0][0] if self._later else None
            self._woken.wait(None if due is None else max(0.0, due - time.monotonic()))
            self._woken.clear()
            with self._settled:
                self._busy = True
            try:
                self._send_queued()
                self._send_due()
            except Exception:  # the thread must live: the next release has to go out
                log.exception("the event publisher failed")
            finally:
                with self._settled:
                    self._busy = False
                    self._settled.notify_all()

    def _send_queued(self) -> None:
        lines: dict[int, list[dict[str, Any]]] = {}
        while self._incoming:
            root_id, payloads = self._incoming.popleft()
            lines.setdefault(root_id, []).extend(payloads)  # each tree's in release order
        if not lines:
            return
        layer = get_channel_layer()
        if layer is not self._layer:  # settings changed the layer (tests do)
            self._use(layer)
        messages = []
        for root_id, payloads in lines.items():
            group, message = self._envelope(root_id, payloads)
            messages.append((f"{self._prefix}__group__{group}", layer.serialize(message)))
        taken = self._send(messages, tries=2)
        self._report(taken, events=sum(len(payloads) for payloads in lines.values()))
        if not taken:
            push = next(self._ids)
            self._untaken.add(push)
            self._schedule(push, messages, self._resend)

    def _send_due(self) -> None:
        while self._later and self._later[0][0] <= time.monotonic():
            _, push, messages, pauses = heapq.heappop(self._later)
            taken = self._send(messages, tries=1)
            self._report(taken, events=0)  # counted when they first failed
            if taken:
                self._untaken.discard(push)
            if pauses:
                self._schedule(push, messages, pauses)
            elif push in self._untaken:
                self._untaken.discard(push)
                self._given_up += 1
                if self._given_up == 1:
                    log.error(
                        "Redis took no copy of some events in %g s; they are not pushed again "
                        "(a page that sees a later event fetches the missing ones from the "
                        "stored events), and further ones are not logged until Redis takes "
                        "events again",
                        sum(self._resend),
                    )

    def _report(self, taken: bool, *, events: int) -> None:
        """One warning when pushes start failing and one when Redis takes them again: an
        outage logs two lines, not one for every release and every try meanwhile (a busy
        process releases hundreds a second)."""
        if not taken:
            if not self._failed_events and events:
                log.warning(
                    "pushing events to Redis failed (%s); they are sent again after each of "
                    "%s s, and further failures are not logged until Redis takes them",
                    self._failure,
                    ", ".join(f"{pause:g}" for pause in self._resend),
                )
            self._failed_events += events
        elif self._failed_events:
            what = (
                f"{self._given_up} pushes of them were given up, the rest are sent again"
                if self._given_up
                else "they are sent again"
            )
            log.warning(
                "Redis takes events again: %d events had failed to push; %s",
                self._failed_events,
                what,
            )
            self._failed_events = self._given_up = 0

    def _schedule(self, push: int, messages: list, pauses: tuple[float, ...]) -> None:
        heapq.heappush(self._later, (time.monotonic() + pauses[0], push, messages, pauses[1:]))

    # --- Redis -------------------------------------------------------------------------------

    def _use(self, layer: Any) -> None:
        for shard in range(len(self._clients)):
            self._drop(shard)
        self._layer = layer
        self._hosts = _hosts(layer) or []
        self._clients = [None] * len(self._hosts)
        # channels_redis.pubsub.RedisPubSubLoopLayer._get_group_channel_name's prefix
        self._prefix = layer._kwargs.get("prefix", "asgi")

    def _send(self, messages: list[tuple[str, bytes]], *, tries: int) -> bool:
        """Publish on each shard in one round trip; True when every shard took them. A
        connection that failed is dropped, and the next try opens a fresh one."""
        shards: dict[int, list[tuple[str, bytes]]] = {}
        for channel, data in messages:
            shard = _consistent_hash(channel, len(self._hosts))
            shards.setdefault(shard, []).append((channel, data))
        taken = True
        for shard, sent in shards.items():
            for attempt in range(tries):
                try:
                    pipeline = self._client(shard).pipeline(transaction=False)
                    for channel, data in sent:
                        pipeline.publish(channel, data)
                    pipeline.execute()
                    break
                except redis.RedisError as error:
                    self._drop(shard)
                    if attempt + 1 == tries:
                        self._failure = error
                        taken = False
        return taken

    def _client(self, shard: int) -> redis.Redis:
        client = self._clients[shard]
        if client is None:
            # No retries of the client's own: a failed push follows the rules above.
            options = {"socket_timeout": 5, "socket_connect_timeout": 2, "retry": None}
            host = {**options, **self._hosts[shard]}
            address = host.pop("address", None)
            client = redis.Redis.from_url(address, **host) if address else redis.Redis(**host)
            self._clients[shard] = client
        return client

    def _drop(self, shard: int) -> None:
        client, self._clients[shard] = self._clients[shard], None
        if client is not None:
            client.close()


def _hosts(layer: Any) -> list[dict[str, Any]] | None:
    """The layer's hosts as a Redis client's arguments, or None for a sentinel's."""
    hosts = decode_hosts(layer._kwargs.get("hosts"))  # the layer keeps its CONFIG
    if any("master_name" in host for host in hosts):
        return None
    return hosts
