"""The connection to a remote MCP server: its URL through the address guard (with the
servers' own allowed hosts, REMOTE_MCP_ALLOWED_HOSTS), and an httpx2 client (the mcp SDK's
HTTP library) pinned to the address that was checked.

A session runs in an event loop of its own for one call, and an async client belongs to the
loop it was made on, so each session gets its own client here: there is no pool to share.
"""

from dataclasses import dataclass

import httpx2
from django.conf import settings

from research.outbound.errors import BadURL
from research.outbound.guard import DEFAULT_PORTS, checked


@dataclass(frozen=True)
class McpTarget:
    url: httpx2.URL
    address: str  # the checked address every request of the session goes to


def mcp_target(raw: str) -> McpTarget:
    """The server's URL and its checked address; BadURL, Unresolvable or Refused."""
    try:
        url = httpx2.URL(raw)
    except (httpx2.InvalidURL, UnicodeError) as error:
        raise BadURL("invalid", detail=str(error)) from None
    if url.scheme not in DEFAULT_PORTS or not url.host:
        raise BadURL("scheme" if url.host else "host", scheme=url.scheme)
    port = url.port or DEFAULT_PORTS[url.scheme]
    host = url.raw_host.decode("ascii")
    addresses = checked(host, port, allowed=settings.REMOTE_MCP_ALLOWED_HOSTS)
    return McpTarget(url, str(addresses[0]))


def mcp_http_client(target: McpTarget, headers: dict[str, str]) -> httpx2.AsyncClient:
    """The session's client; the headers, which hold the server's secrets, go to the server
    and nowhere else."""
    return httpx2.AsyncClient(
        headers={str(name): str(value) for name, value in (headers or {}).items()},
        timeout=httpx2.Timeout(settings.REMOTE_MCP_TIMEOUT_SECONDS),
        trust_env=False,  # a proxy would connect to addresses the guard never saw
        transport=_PinnedTransport(target),
    )


class _PinnedTransport(httpx2.AsyncBaseTransport):
    """Sends every request to the address the guard checked, with the Host header and TLS
    server name of the URL: a DNS answer that changes after the check cannot redirect it.
    One session talks to one host, so no connection is shared between host names."""

    def __init__(self, target: McpTarget):
        self.host = target.url.host
        self.address = target.address
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
