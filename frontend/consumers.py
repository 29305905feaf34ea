"""The live tree over a websocket: `/ws/runs/<root id>/?after=N`.

On connect: join the tree's group, then in one read of the database (`_open`: the user from
the session, the run, what the browser is missing) refuse anyone but the owner, or send what
the browser is missing (a snapshot, or the stored events after N); then forward live events.
The group is joined before the database is read, so an event committed meanwhile is both read
and forwarded: the browser drops the second copy by its sequence number, and nothing falls
between the two. A socket refused leaves the group before anything is sent on it.

One read, not three: the user's lookup, the run's and the snapshot's each went to a thread of
the server's pool and back, and each took a connection out of the PostgreSQL pool and gave it
back (issue 25, round twenty-six).
"""

import logging
from typing import Any
from urllib.parse import parse_qs

from channels.auth import get_user
from channels.consumer import get_handler_name
from channels.db import DatabaseSyncToAsync
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.db import connection

from frontend import frames
from frontend.delivery import EVENTS_MESSAGE, group_name
from research import selectors
from research.errors import NotFound
from research.ops.metrics import observe_push_lag


# The consumer's reads run on the server's pool of threads, not on the one thread Django and
# Channels share for thread-sensitive sync code (every sync view, every default
# database_sync_to_async): while that thread is busy, a handshake waiting behind it would be
# dropped by daphne's timeout. The reads touch no thread-bound state.
class DatabaseRead(DatabaseSyncToAsync):
    """database_sync_to_async on the server's pool of threads; each call gives its thread's
    connection back (to the pool, on PostgreSQL), as the threads outlive it."""

    def __init__(self, func):
        super().__init__(func, thread_sensitive=False)

    def thread_handler(self, loop, *args, **kwargs):
        try:
            return super().thread_handler(loop, *args, **kwargs)
        finally:
            connection.close()


database_read = DatabaseRead
log = logging.getLogger(__name__)

# Close codes the page knows: stop reconnecting and say why.
NOT_SIGNED_IN = 4401
NOT_FOUND = 4404


class RunTreeConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None
    # Every number up to this one was sent (while connecting, then live), and the numbers
    # above it that were sent live: a copy of either is dropped.
    sent_until = 0
    sent_above: set[int]

    async def connect(self) -> None:
        self.sent_above = set()
        group = group_name(int(self.scope["url_route"]["kwargs"]["root_id"]))
        await self.channel_layer.group_add(group, self.channel_name)
        try:
            opened = await self._open(self._after())
        except BaseException:  # the database failed: no channel is left behind in the group
            await self.channel_layer.group_discard(group, self.channel_name)
            raise
        if isinstance(opened, int):
            await self.channel_layer.group_discard(group, self.channel_name)
            # Accept, then close with a code: a refused handshake looks like a network error
            # to the browser, which would retry forever. Nothing about the run is sent.
            await self.accept()
            await self.close(code=opened)
            return
        self.group = group
        await self.accept()
        after, events = opened
        if isinstance(events, dict):  # a snapshot
            self.sent_until = events["seq"]
            await self.send_json(events)
            return
        self.sent_until = after
        for event in events:
            await self.send_json(event)
            self.sent_until = event["seq"]

    async def dispatch(self, message: dict[str, Any]) -> None:
        """The tree's events come in EVENTS_MESSAGE messages (frontend.delivery), one or
        several each, and every one is forwarded from here whatever its type, so a new event
        type reaches the browser without a handler of its own; the websocket's own messages
        go to Channels' handlers. Anything else is logged and dropped: one unknown message
        must not close every viewer's socket.

        Unlike Channels' dispatch, no close_old_connections() before every handler: that runs
        on the shared sync thread (see database_read), so every live event of every viewer
        would queue behind every sync view. This consumer reads only through database_read,
        whose threads close their own connections."""
        if message["type"] == EVENTS_MESSAGE:
            if self.group is None:  # refused: events that came while it connected are dropped
                return
            for event in message["events"]:  # each its own frame, in number order
                await self._forward(event)
            return
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            log.warning("websocket: dropped a message of unknown type %r", message["type"])
            return
        await handler(message)

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def send_json(self, content: Any, close: bool = False) -> None:
        """Every frame within the server's limit: large reports go by REST (see frames)."""
        await super().send_json(frames.fit(content), close=close)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The browser only listens; anything it sends is ignored."""

    @database_read
    def _open(self, after: int | None) -> int | tuple[int, list[dict[str, Any]] | dict[str, Any]]:
        """The close code of a refusal; or what the browser is missing: the stored events
        after `after`, or a snapshot (a dict). The user is read here from the session
        (frontend.routing leaves it to this read)."""
        user = self.scope["user"]._wrapped = get_user.func(self.scope)
        if not user.is_authenticated:
            return NOT_SIGNED_IN
        try:
            root = selectors.run_get(
                owner=user, run_id=int(self.scope["url_route"]["kwargs"]["root_id"])
            )
        except NotFound:
            return NOT_FOUND
        if not root.is_root:
            return NOT_FOUND
        # A number beyond the tree's last event comes from another database (a reset, a
        # restore): only a snapshot can put that page right.
        if after is not None and after <= root.event_seq:
            events = selectors.events_after(root_id=root.pk, after=after)
            if events is not None:
                return after, events
        return 0, selectors.tree_snapshot(root=root)

    def _after(self) -> int | None:
        values = parse_qs(self.scope.get("query_string", b"").decode()).get("after")
        if not values or not values[0].isdigit():
            return None
        return int(values[0])

    async def _forward(self, event: dict[str, Any]) -> None:
        """Send a live event unless this socket has sent it: while connecting (up to
        `sent_until`), or as an earlier copy (a push sent again after a Redis outage,
        frontend.delivery). Live events may arrive out of order (many agent threads): the
        browser puts them in order, and `sent_until` moves up only over numbers sent."""
        seq = event["seq"]
        if seq <= self.sent_until or seq in self.sent_above:
            return
        await self.send_json(event)
        observe_push_lag(event)
        self.sent_above.add(seq)
        while self.sent_until + 1 in self.sent_above:
            self.sent_until += 1
            self.sent_above.discard(self.sent_until)
