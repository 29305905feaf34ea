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
INVALID_REQUEST = -32600  # JSON-RPC's code
# What a JSON value that is not an MCP request id is (the SDK takes strings and integers).
_NOT_AN_ID = {
    dict: "an object",
    list: "an array",
    type(None): "null",
    bool: "a boolean",
    float: "a decimal number",
}


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
        if scope["method"] == "POST":
            body = await _body(receive)
            if (refusal := invalid_request_id(body)) is not None:
                await _json_response(send, 400, refusal)
                return
            receive = _replay(body, receive)
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


def invalid_request_id(body: bytes) -> dict | None:
    """A JSON-RPC Invalid Request error for a request whose id is not a string or an
    integer; None for anything else (the SDK answers bodies that are not JSON, batches,
    notifications and responses itself).

    The SDK's handshake-era transport validates a message against request, then notification:
    a request whose id is an object (or an array, null, true, 2.0) fails the first and passes
    the second, so it was acknowledged with 202 and never answered."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return None
    what = _NOT_AN_ID.get(type(message["id"]))
    if what is None:
        return None
    text = f"Invalid Request: an MCP request's id must be a string or an integer, not {what}"
    if message["id"] is not None:
        shown = json.dumps(message["id"])
        text += f": {shown if len(shown) <= 80 else shown[:79] + '…'}"
    return {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": text + "."}}


async def _body(receive: Receive) -> bytes:
    """The whole request body (the SDK reads it whole too)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b""  # the client went away: the SDK sees an empty body
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the body read already, then what the client sends next (its
    disconnect, which the SDK watches for)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed():
        return pending.pop() if pending else await receive()

    return replayed


async def _unauthorized(send: Send) -> None:
    await _json_response(
        send,
        401,
        {"error": "unauthorized", "detail": UNAUTHORIZED},
        [(b"www-authenticate", b'Bearer realm="canopy"')],
    )


async def _json_response(
    send: Send, status: int, data: dict, headers: list[tuple[bytes, bytes]] = ()
) -> None:
    body = json.dumps(data).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
