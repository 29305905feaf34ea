"""A session with a remote MCP server for one call: its URL through the address guard, the
connection pinned to the address that was checked, the SDK's client over streamable HTTP in
an event loop of its own thread while the agent's thread waits and watches its cancel token.
The headers, which hold the server's secrets, go to the server and nowhere else."""

import concurrent.futures
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import anyio
import anyio.from_thread
import httpx2
from django.conf import settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agents.runtime.context import Cancelled
from agents.tools.base import ToolError
from research import outbound
from research.models import RemoteServer

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
        url, address = guarded(server)
    except ToolError as refused:
        raise ToolError(f"{what}: {refused}") from None

    async def session() -> T:
        with anyio.fail_after(timeout):
            async with (
                _http_client(url, address, server.headers) as http,
                Client(streamable_http_client(str(url), http_client=http)) as client,
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


def guarded(server: RemoteServer) -> tuple[httpx2.URL, str]:
    """The server's URL and the address to connect to, after read_page's address guard."""
    try:
        url = httpx2.URL(server.url)
    except httpx2.InvalidURL:
        raise ToolError(f"the MCP server {server.name} has an invalid URL.") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ToolError(f"the MCP server {server.name} has no http or https URL.")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(url.raw_host.decode("ascii"), port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise ToolError(
            f"the host of the MCP server {server.name}, {url.host}, does not resolve ({error})."
        ) from None
    addresses = sorted(
        {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos},
        key=lambda address: (address.version, str(address)),
    )
    allowed = outbound.host_allowed(url.host, port, allowed=settings.REMOTE_MCP_ALLOWED_HOSTS)
    if not allowed and (where := outbound.refused_address(url.host, addresses)):
        raise ToolError(
            f"refused the MCP server {server.name}: {where}; an operator may allow its host "
            "(REMOTE_MCP_ALLOWED_HOSTS)."
        )
    return url, str(addresses[0])


def _http_client(url: httpx2.URL, address: str, headers: dict[str, str]) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        headers={str(name): str(value) for name, value in (headers or {}).items()},
        timeout=httpx2.Timeout(settings.REMOTE_MCP_TIMEOUT_SECONDS),
        trust_env=False,  # a proxy would connect to addresses the guard never saw
        transport=_PinnedTransport(url, address),
    )


class _PinnedTransport(httpx2.AsyncBaseTransport):
    """Sends every request to the address the guard checked, with the Host header and TLS
    server name of the URL: a DNS answer that changes after the check cannot redirect it."""

    def __init__(self, url: httpx2.URL, address: str):
        self.host = url.host
        self.address = address
        self.inner = httpx2.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.host != self.host:
            raise httpx2.ConnectError(f"refused a request to another host ({request.url.host})")
        if request.url.scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": self.host}
        request.headers["Host"] = request.url.netloc.decode("ascii")
        request.url = request.url.copy_with(host=self.address)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()
