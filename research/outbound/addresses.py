"""What an outbound request may reach: the one verdict on addresses for every request Canopy
sends on someone else's word (pages an agent reads, remote MCP servers, callbacks).

The guard (`research.outbound.guard`) resolves and pins; each caller frames a refusal in
words for its audience (the model, the admin, the API); what counts as not public, and how
an address must be written, is decided here once, so the callers can never disagree.
"""

import ipaddress
import re

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES = {
    ipaddress.ip_address("169.254.169.254"),
    ipaddress.ip_address("fd00:ec2::254"),
}
_NOT_PUBLIC = (
    ("is_loopback", "loopback"),
    ("is_unspecified", "unspecified"),
    ("is_link_local", "link-local"),
    ("is_multicast", "multicast"),
    ("is_private", "private"),
    ("is_reserved", "reserved"),
)
_NUMBER = re.compile(r"0x[0-9a-f]*|[0-9]+", re.IGNORECASE)


class AmbiguousAddress(ValueError):
    """An IPv4 address written so that programs read it differently ("0177.0.0.1")."""


def _embedded_ipv4(ip: IPAddress) -> list[IPAddress]:
    """IPv4 addresses an IPv6 address carries (mapped, 6to4, Teredo): checked as well."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    found = [ip.ipv4_mapped, ip.sixtofour, ip.teredo[1] if ip.teredo else None]
    return [address for address in found if address is not None]


def not_public(ip: IPAddress) -> str | None:
    """What kind of non-public address `ip` is ("private", ...), or None for a public one."""
    for address in [ip, *_embedded_ipv4(ip)]:
        if address in METADATA_ADDRESSES:
            return "cloud metadata"
        for attribute, label in _NOT_PUBLIC:
            if getattr(address, attribute):
                return label
        if not address.is_global:  # e.g. 100.64.0.0/10, shared by carrier-grade NAT
            return "non-public"
    return None


def refused_address(host: str, addresses: list[IPAddress]) -> str | None:
    """Where the first non-public address of `host` is, in neutral words each caller frames
    for its audience ("example.org resolves to 10.0.0.1, a private address"); None when every
    address is public."""
    for address in addresses:
        if kind := not_public(address):
            if host == str(address):
                return f"{address} is a {kind} address"
            return f"{host} resolves to {address}, a {kind} address"
    return None


def literal_address(host: str) -> IPAddress | None:
    """The address a host names when it is an address literal, else None (a name).

    A host ending in a number is an IPv4 address to browsers and resolvers alike, but
    "0177.0.0.1" is 127.0.0.1 to one and an error or 177.0.0.1 to another: only four decimal
    numbers without leading zeros are taken (AmbiguousAddress otherwise). ValueError for an
    IPv6 literal that is not one."""
    host = host.strip("[]").rstrip(".")
    if ":" in host:
        return ipaddress.IPv6Address(host)
    if not _NUMBER.fullmatch(host.rsplit(".", 1)[-1]):
        return None
    try:
        return ipaddress.IPv4Address(host)
    except ValueError:
        raise AmbiguousAddress(host) from None


def host_allowed(host: str, port: int, *, allowed: list[str] | None = None) -> bool:
    """Whether a list of hosts lets this host (or host:port) through the address check
    (tests and intranets): READ_PAGE_ALLOWED_HOSTS for pages and callbacks unless the
    purpose has its own (REMOTE_MCP_ALLOWED_HOSTS for remote MCP servers)."""
    host = host.lower()
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    entries = settings.READ_PAGE_ALLOWED_HOSTS if allowed is None else allowed
    allowed_hosts = {entry.lower() for entry in entries}
    return host in allowed_hosts or f"{host}:{port}" in allowed_hosts
