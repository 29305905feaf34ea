"""Websocket routes and the auth they go through; research.asgi wraps them in the origin check.

`auth_stack` is Channels' AuthMiddlewareStack with one change: the user is not looked up by
the middleware, on a thread of its own, but by the consumer's first read of the database
(RunTreeConsumer._open), with the run and the snapshot: one trip to a thread and one
connection taken from the pool where there were three. Until that read `scope["user"]` is
Channels' lazy user, which raises if anything reads it before.

`LayerDown` is the stack's outer part: while the channel layer's Redis is down a viewer's
socket gets no channel, cannot join its tree's group or leave it, and daphne logged each as a
traceback, hundreds a minute while every page retried (817 in a soak's six 3 s outages). The
socket is closed instead (before its handshake: the page retries as after any network
error), and the outage is two lines of the log, as the publisher's is (frontend.publisher).
"""

import logging
from typing import Any

from channels.auth import AuthMiddleware
from channels.sessions import CookieMiddleware, SessionMiddleware
from django.urls import path
from redis.exceptions import RedisError

from frontend.consumers import RunTreeConsumer

log = logging.getLogger(__name__)

websocket_urlpatterns = [
    path("ws/runs/<int:root_id>/", RunTreeConsumer.as_asgi()),
]


class _UserReadByTheConsumer(AuthMiddleware):
    async def resolve_scope(self, scope):
        """Left to the consumer's first read."""


def auth_stack(inner):
    return LayerDown(CookieMiddleware(SessionMiddleware(_UserReadByTheConsumer(inner))))


class LayerDown:
    """A websocket whose channel layer cannot be reached is closed, not a traceback."""

    # Sockets closed since the layer last answered, for the process (0 while it answers).
    refused = 0

    def __init__(self, inner) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "websocket.accept" and LayerDown.refused:
                log.warning(
                    "the channel layer answers again: %d viewers' sockets were closed "
                    "meanwhile, and their pages reconnect",
                    LayerDown.refused,
                )
                LayerDown.refused = 0
            await send(message)

        try:
            await self.inner(scope, receive, sending)
        except (RedisError, OSError) as error:  # refused, reset, timed out, a failed handshake
            if not LayerDown.refused:
                log.warning(
                    "viewers' sockets cannot reach the channel layer (%s): they are closed "
                    "until it answers",
                    error,
                )
            LayerDown.refused += 1
            # Before its handshake the socket is refused; after it (the layer failed a live
            # socket) it is closed, as daphne closes one whose application raised, and the
            # page reconnects. One whose browser already left ignores it.
            await send({"type": "websocket.close", "code": 1011})
