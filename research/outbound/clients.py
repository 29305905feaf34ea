"""One pooled HTTP client per purpose per process, built once on first use (a fresh client
per request paid a new SSL context and connection pool every time: 13% of a research's busy
samples in issue 25). httpx clients are thread-safe, so the agent threads share them.

Purposes: "pages" (read_page) and "callbacks" connect through the address guard, directly
(no proxy from the environment: a proxy would connect to addresses the guard never saw),
never following redirects (each hop is a new, checked request); "search" reaches the
search provider the operator configured, as any client would. The clients for SDKs that
bring their own HTTP library (the openai client's, httpx2) are in `sdk`.
"""

import ssl
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx
from django.conf import settings
from django.core.signals import setting_changed

from research.outbound.errors import ConnectFailed, OutboundError, TimedOut, TransferFailed
from research.outbound.guard import URL, GuardedBackend, port_of

GUARDED = {"pages", "callbacks"}
PURPOSES = GUARDED | {"search"}
T = TypeVar("T")
# The settings a client is built from: a test that changes one gets a client built anew.
_BUILT_FROM = {"READ_PAGE_ALLOWED_HOSTS", "CALLBACK_CA_BUNDLE"}

_lock = threading.Lock()
_clients: dict[str, Any] = {}


def client(purpose: str) -> httpx.Client:
    """The process's client for `purpose`, built on first use."""
    return built_once(purpose, lambda: _build(purpose))


def built_once(key: str, build: Callable[[], T]) -> T:
    """The client cached under `key`, built by `build` the first time (under a lock, so two
    threads never build two)."""
    found = _clients.get(key)
    if found is not None:
        return found
    with _lock:
        if key not in _clients:
            _clients[key] = build()
        return _clients[key]


def _build(purpose: str) -> httpx.Client:
    if purpose not in PURPOSES:
        raise ValueError(f"no outbound purpose {purpose!r}; one of {sorted(PURPOSES)}")
    if purpose == "search":
        return httpx.Client()
    return httpx.Client(
        follow_redirects=False,
        trust_env=False,
        transport=_guarded_transport(verify=_verify(purpose)),
    )


def _verify(purpose: str) -> ssl.SSLContext | bool:
    if purpose == "callbacks" and settings.CALLBACK_CA_BUNDLE:
        return ssl.create_default_context(cafile=settings.CALLBACK_CA_BUNDLE)
    return True


def _guarded_transport(*, verify: ssl.SSLContext | bool) -> httpx.HTTPTransport:
    transport = httpx.HTTPTransport(verify=verify, trust_env=False)
    # httpx takes no network backend, its pool does: every socket it opens passes the guard.
    transport._pool._network_backend = GuardedBackend(lambda: settings.READ_PAGE_ALLOWED_HOSTS)
    return transport


def send(
    purpose: str,
    method: str,
    url: URL | str,
    *,
    timeout: float,
    stream: bool = False,
    **request: Any,
) -> httpx.Response:
    """Send one request with the purpose's client; OutboundError (never an httpx error) when
    there is no answer. With `stream`, the caller reads the body with `chunks` and closes."""
    session = client(purpose)
    built = session.build_request(method, url, timeout=timeout, **request)
    try:
        return session.send(built, stream=stream)
    except OutboundError:
        raise
    except httpx.HTTPError as error:
        raise _neutral(purpose, built.url, error) from None


def chunks(response: httpx.Response) -> Iterator[bytes]:
    """The body, decompressed piece by piece; TimedOut or TransferFailed if it breaks off."""
    try:
        yield from response.iter_bytes()
    except httpx.HTTPError as error:
        raise _neutral("", response.request.url, error) from None


def _neutral(purpose: str, url: httpx.URL, error: httpx.HTTPError) -> OutboundError:
    kind, detail = type(error).__name__, str(error)
    # A TLS handshake that fails or stalls on a guarded purpose: the connection was never
    # usable, as when no address accepted it.
    stalled = purpose in GUARDED and isinstance(error, httpx.ConnectTimeout)
    if stalled or isinstance(error, httpx.ConnectError):
        return ConnectFailed(url.host, port_of(url), detail, kind)
    if isinstance(error, httpx.TimeoutException):
        return TimedOut(kind, detail)
    return TransferFailed(kind, detail)


def _forget(*, setting: str, **_: Any) -> None:
    if setting in _BUILT_FROM:
        with _lock:
            _clients.clear()  # not closed: a thread may be reading with one


setting_changed.connect(_forget, dispatch_uid="research.outbound.clients")
