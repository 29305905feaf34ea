"""/mcp: Canopy's MCP tools over streamable HTTP, inside the ASGI app that daphne serves.

Every request carries the user's API token as a bearer token (`Authorization: Bearer KEY`,
the key `manage.py drf_create_token NAME` prints); without a valid one the answer is a 401
before the MCP SDK sees the request. The SDK binds each MCP session to the user that opened
it, and every tool acts as that user, so a client sees only its owner's researches.

Lifespan. The SDK's session manager keeps its sessions in a task group that must be entered
once and outlive the requests (a Starlette app enters it in its lifespan). daphne does not
run the ASGI lifespan protocol, so the first /mcp request enters it here, in a task of the
server's loop that lives as long as the loop.
"""

import asyncio
import json
import logging
from functools import partial

from django.conf import settings
from django.db import close_old_connections
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from rest_framework.authtoken.models import Token
from starlette.types import ASGIApp, Receive, Scope, Send

from research.mcp_server.threads import run_sync
from research.mcp_server.tools import build_server

log = logging.getLogger(__name__)

PATH = "/mcp"
# Where the authenticated user's id travels in the ASGI scope, from here to the tools.
USER_ID = "canopy.user_id"
UNAUTHORIZED = (
    "Canopy's MCP endpoint needs the user's API token: send `Authorization: Bearer KEY` "
    "(manage.py drf_create_token NAME prints a key)."
)


def owner_from_request(ctx: Context) -> int:
    return ctx.request_context.request.scope[USER_ID]


class McpEndpoint:
    """Routes /mcp to the MCP SDK and everything else to `app` (Django)."""

    def __init__(self, app: ASGIApp):
        self.app = app
        self._mcp: ASGIApp | None = None
        self._ready: asyncio.Event | None = None
        self._manager_task: asyncio.Task | None = None  # kept: the loop holds tasks weakly

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == PATH or path.startswith(PATH + "/")):
            await self.app(scope, receive, send)
            return
        user_id = await _user_of(scope)
        if user_id is None:
            await _unauthorized(send)
            return
        mcp_app = await self._started()
        # The SDK binds a session to the principal that opened it (`scope["user"]`): a
        # session id of alice's presented with bob's token is an unknown session.
        token = AccessToken(token="canopy-api-token", client_id=f"user-{user_id}", scopes=[])
        scope = {**scope, "user": AuthenticatedUser(token), USER_ID: user_id}
        await mcp_app(scope, receive, send)

    async def _started(self) -> ASGIApp:
        if self._ready is None:
            self._ready = asyncio.Event()
            server = build_server(owner_of=owner_from_request)
            self._mcp = server.streamable_http_app(
                streamable_http_path=PATH, transport_security=transport_security()
            )
            self._manager_task = asyncio.get_running_loop().create_task(
                self._run_sessions(server.session_manager)
            )
        await self._ready.wait()
        if self._manager_task.done():
            raise RuntimeError("the MCP session manager could not start (see the log)")
        return self._mcp

    async def _run_sessions(self, manager) -> None:
        try:
            async with manager.run():
                self._ready.set()
                await asyncio.Event().wait()  # until the loop stops
        except Exception:
            log.exception("the MCP session manager stopped")
            self._ready.set()  # the requests waiting for it fail instead of hanging
            raise


def transport_security() -> TransportSecuritySettings:
    """The SDK's Host and Origin checks (DNS rebinding), from Django's ALLOWED_HOSTS."""
    hosts = settings.ALLOWED_HOSTS
    if "*" in hosts or any(host.startswith(".") for host in hosts):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[pattern for host in hosts for pattern in (host, f"{host}:*")],
        allowed_origins=[
            pattern
            for host in hosts
            for scheme in ("http", "https")
            for pattern in (f"{scheme}://{host}", f"{scheme}://{host}:*")
        ]
        + list(settings.CSRF_TRUSTED_ORIGINS),
    )


async def _user_of(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, key = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and key.strip():
                return await run_sync(partial(_token_user, key.strip()))
    return None


def _token_user(key: str) -> int | None:
    close_old_connections()
    try:
        row = (
            Token.objects.filter(key=key, user__is_active=True)
            .values_list("user_id", flat=True)
            .first()
        )
    finally:
        close_old_connections()
    return row


async def _unauthorized(send: Send) -> None:
    body = json.dumps({"error": "unauthorized", "detail": UNAUTHORIZED}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="canopy"'),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
