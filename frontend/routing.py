"""Websocket routes and the auth they go through; research.asgi wraps them in the origin check.

`auth_stack` is Channels' AuthMiddlewareStack with one change: the user is looked up on the
server's pool of threads rather than on the one thread Django and Channels share for
thread-sensitive sync code (every sync view). While that thread is busy, a handshake waiting
behind it would be dropped by daphne's timeout; the lookup needs no thread-bound state.
"""

from channels.auth import AuthMiddleware, get_user
from channels.sessions import CookieMiddleware, SessionMiddleware
from django.urls import path

from frontend.consumers import RunTreeConsumer, database_read

websocket_urlpatterns = [
    path("ws/runs/<int:root_id>/", RunTreeConsumer.as_asgi()),
]

# channels.auth.get_user is wrapped for the shared thread; its function is run here instead.
_get_user = database_read(get_user.func)


class _AuthOffTheSharedThread(AuthMiddleware):
    async def resolve_scope(self, scope):
        scope["user"]._wrapped = await _get_user(scope)


def auth_stack(inner):
    return CookieMiddleware(SessionMiddleware(_AuthOffTheSharedThread(inner)))
