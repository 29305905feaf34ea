"""Clients for the SDKs that bring their own HTTP library: the openai client takes an
httpx2.Client (the LLM endpoint, and the "openai" search provider). Built once per process
and purpose, as the other clients are, with the openai client's own defaults; it sets the
timeout of each request itself. Both reach services the operator configured: no guard."""

import httpx2

from research.outbound.clients import built_once

SDK_PURPOSES = {"llm", "search"}
# What an openai client returns when asked for the raw answer (`cast_to=RawResponse`): the
# lean model call parses the body itself.
RawResponse = httpx2.Response
# The openai client's DEFAULT_CONNECTION_LIMITS: many agent threads share one client.
_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)


def openai_http_client(purpose: str) -> httpx2.Client:
    """The process's httpx2 client for an openai client of `purpose` ("llm" or "search")."""
    if purpose not in SDK_PURPOSES:
        raise ValueError(f"no SDK purpose {purpose!r}; one of {sorted(SDK_PURPOSES)}")
    return built_once(f"sdk-{purpose}", _build)


def _build() -> httpx2.Client:
    return httpx2.Client(limits=_LIMITS, follow_redirects=True)
