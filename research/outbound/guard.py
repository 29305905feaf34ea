"""The address guard, checked when the socket opens (as healthchecks' `opensocket` does): the
host is resolved, refused when any address is not public (unless the purpose's allowed hosts
let it through), and the connection goes to an address that was checked, never to a second
DNS answer, so a name that changes between the check and the connection (rebinding) cannot
send a request inside the network. A redirect is a new request, so it passes the same check.
"""

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

import httpcore
import httpx

from research.outbound.addresses import IPAddress, host_allowed, refused_address
from research.outbound.errors import BadURL, ConnectFailed, Refused, Unresolvable

DEFAULT_PORTS = {"http": 80, "https": 443}

URL = httpx.URL  # the parsed URL every caller passes around
# A host as it goes on the wire (IDNA-encoded; an IPv6 literal without its brackets).
_HOST = re.compile(rb"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]+(?:%25[A-Za-z0-9._~-]+)?")


def parse_url(raw: str) -> URL:
    """An http or https URL with a host, or BadURL."""
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, UnicodeError) as error:
        raise BadURL("invalid", detail=str(error)) from None
    if url.scheme not in DEFAULT_PORTS:
        raise BadURL("scheme", scheme=url.scheme)
    if not url.host:
        raise BadURL("host")
    if not _HOST.fullmatch(url.raw_host):  # "exa mple.com" reached DNS as "exa%20mple.com"
        written = urlsplit(raw).hostname or url.host
        raise BadURL("invalid", detail=f"its host {written!r} is not a host name or an address")
    return url


def join(url: URL, location: str) -> URL:
    """Where a redirect's Location leads from `url` (BadURL when it leads nowhere); the
    caller checks the result with parse_url."""
    try:
        return url.join(location)
    except (httpx.InvalidURL, UnicodeError) as error:
        raise BadURL("invalid", detail=str(error)) from None


def port_of(url: URL) -> int:
    return url.port or DEFAULT_PORTS[url.scheme]


def resolve(host: str, port: int) -> list[IPAddress]:
    """The host's addresses, IPv4 first (many servers have no IPv6 route)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise Unresolvable(host, str(error)) from None
    addresses: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if address not in addresses:
            addresses.append(address)
    return sorted(addresses, key=lambda address: address.version)


def checked(host: str, port: int, *, allowed: list[str] | None = None) -> list[IPAddress]:
    """The host's addresses, or Refused unless every one is public (or the host allowed:
    `allowed` is the purpose's list, READ_PAGE_ALLOWED_HOSTS when None)."""
    addresses = resolve(host, port)
    if host_allowed(host, port, allowed=allowed):
        return addresses
    if where := refused_address(host, addresses):
        raise Refused(host, where)
    return addresses


class GuardedBackend(httpcore.NetworkBackend):
    """httpcore's sockets, opened only to checked addresses: the pool keeps each connection
    under its host name (so TLS names and keep-alive stay per host) and every new connection
    passes the guard."""

    def __init__(self, allowed: Callable[[], list[str] | None]) -> None:
        self.allowed = allowed
        self.inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable | None = None,
    ) -> httpcore.NetworkStream:
        last = "no address"
        for address in checked(host, port, allowed=self.allowed()):
            try:
                return self.inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                last = str(error) or type(error).__name__
        raise ConnectFailed(host, port, last)

    def connect_unix_socket(self, *args, **kwargs) -> httpcore.NetworkStream:
        raise ConnectFailed("a Unix socket", 0, "outbound requests go over TCP only")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)
