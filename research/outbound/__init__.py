"""Outbound requests: the one module that opens HTTP connections to other machines, and the
one verdict on what they may reach (pages an agent reads, remote MCP servers, callbacks).

- `addresses`: what counts as not public, how an address must be written, allowed hosts.
- `guard`: parse, resolve, refuse, and the socket backend that connects only to checked
  addresses (no DNS-rebinding window).
- `clients`: one pooled client per purpose per process ("pages", "callbacks", "search",
  "llm"); `send` and `chunks` raise this package's errors, never an HTTP library's.
- `mcp`: the remote MCP session's pinned client (httpx2, the mcp SDK's library).
- `errors`: neutral exceptions; each caller frames them for the model, the admin or the API.

Only this package imports httpx or httpx2 (an import-linter contract in pyproject.toml).
"""

from research.outbound.addresses import (
    METADATA_ADDRESSES,
    AmbiguousAddress,
    IPAddress,
    host_allowed,
    literal_address,
    not_public,
    refused_address,
)
from research.outbound.clients import chunks, client, send
from research.outbound.errors import (
    BadURL,
    ConnectFailed,
    OutboundError,
    Refused,
    TimedOut,
    TransferFailed,
    Unresolvable,
)
from research.outbound.guard import URL, checked, join, parse_url, port_of, resolve

__all__ = [
    "METADATA_ADDRESSES",
    "URL",
    "AmbiguousAddress",
    "BadURL",
    "ConnectFailed",
    "IPAddress",
    "OutboundError",
    "Refused",
    "TimedOut",
    "TransferFailed",
    "Unresolvable",
    "checked",
    "chunks",
    "client",
    "host_allowed",
    "join",
    "literal_address",
    "not_public",
    "parse_url",
    "port_of",
    "refused_address",
    "resolve",
    "send",
]
