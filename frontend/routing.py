"""Websocket routes and the auth they go through; research.asgi wraps them in the origin check.

`auth_stack` is Channels' AuthMiddlewareStack with one change: the user is not looked up by
the middleware, on a thread of its own, but by the consumer's first read of the database
(RunTreeConsumer._open), with the run and the snapshot: one trip to a thread and one
connection taken from the pool where there were three. Until that read `scope["user"]` is
Channels' lazy user, which raises if anything reads it before.
"""

from channels.auth import AuthMiddleware
from channels.sessions import CookieMiddleware, SessionMiddleware
from django.urls import path

from frontend.consumers import RunTreeConsumer

websocket_urlpatterns = [
    path("ws/runs/<int:root_id>/", RunTreeConsumer.as_asgi()),
]


class _UserReadByTheConsumer(AuthMiddleware):
    async def resolve_scope(self, scope):
        """Left to the consumer's first read."""


def auth_stack(inner):
    return CookieMiddleware(SessionMiddleware(_UserReadByTheConsumer(inner)))
