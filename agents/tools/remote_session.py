"""A session with a remote MCP server for one call: its URL through the address guard and its
connection pinned to the address that was checked (both research.outbound.mcp), the SDK's
client over streamable HTTP in an event loop of its own thread while the agent's thread
waits and watches its cancel token. Here the guard's refusals are worded for the model."""

import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import anyio
import anyio.from_thread
from django.conf import settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agents.runtime.context import Cancelled
from agents.tools.base import ToolError
from research import outbound
from research.models import RemoteServer
from research.outbound.mcp import McpTarget, mcp_http_client, mcp_target

if TYPE_CHECKING:
    from agents.runtime.context import AgentContext

T = TypeVar("T")


def call_remote(
    ctx: "AgentContext",
    server: RemoteServer,
    work: Callable[[Client], Awaitable[T]],
    *,
    what: str,
    timeout: float | None = None,
) -> T:
    """`work(client)` in a session with the server, in an event loop of its own thread; the
    agent's thread waits, and stops it when the agent is cancelled."""
    timeout = timeout or settings.REMOTE_MCP_TIMEOUT_SECONDS
    try:
        target = guarded(server)
    except ToolError as refused:
        raise ToolError(f"{what}: {refused}") from None

    async def session() -> T:
        with anyio.fail_after(timeout):
            async with (
                mcp_http_client(target, server.headers) as http,
                Client(streamable_http_client(str(target.url), http_client=http)) as client,
            ):
                return await work(client)

    with anyio.from_thread.start_blocking_portal() as portal:
        future = portal.start_task_soon(session)
        while not concurrent.futures.wait([future], settings.RESEARCH_CANCEL_POLL_SECONDS)[0]:
            if ctx.cancel.is_set():
                future.cancel()
                raise Cancelled(ctx.cancel.reason)
        try:
            return future.result()
        except TimeoutError:
            raise ToolError(
                f"{what}: the MCP server {server.name} did not answer within {timeout:g} s."
            ) from None
        except Exception as error:  # the server is down, refused, or broke the protocol
            raise ToolError(
                f"{what}: the MCP server {server.name} could not be reached or failed "
                f"({describe(error)})."
            ) from None


def describe(error: BaseException) -> str:
    """The innermost reason of a failure (task groups wrap what happened in groups)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    text = str(error) or type(error).__name__
    return text if len(text) <= 300 else text[:299] + "…"


def guarded(server: RemoteServer) -> McpTarget:
    """The server's URL and the address to connect to, after the address guard."""
    try:
        return mcp_target(server.url)
    except outbound.BadURL as bad:
        if bad.problem == "invalid":
            raise ToolError(f"the MCP server {server.name} has an invalid URL.") from None
        raise ToolError(f"the MCP server {server.name} has no http or https URL.") from None
    except outbound.Unresolvable as failure:
        raise ToolError(
            f"the host of the MCP server {server.name}, {failure.host}, does not resolve "
            f"({failure.detail})."
        ) from None
    except outbound.Refused as refused:
        raise ToolError(
            f"refused the MCP server {server.name}: {refused.where}; an operator may allow its "
            "host (REMOTE_MCP_ALLOWED_HOSTS)."
        ) from None
