"""A kept-alive HTTP/1.1 connection per thread to one endpoint the operator configured (the
model's): one POST of bytes already serialised, the answer's status, headers and bytes.

The model call is an agent's hottest outbound request, and each agent makes its calls one
after another from its own thread, so each thread keeps its own connection (the standard
library's http.client): no pool to take it from, no URL objects, no request model built per
call. A connection the server closed while it sat idle fails at its first use; the request
then goes once more on a new connection. (A server that died while answering looks the same
and gets the request twice; the openai client retries a lost connection too.) Anything else is
raised in this package's neutral words (ConnectFailed, TimedOut, TransferFailed), once: the
caller (agents.llm.openai_client) decides about retries.

Not for guarded purposes: it connects where the URL says, with no address check, like the
openai client it stands in front of (the operator chose the endpoint).
"""

import http.client
import ssl
import threading
import urllib.request
from dataclasses import dataclass
from email.message import Message
from functools import cache
from urllib.parse import urlsplit

import httpx2

from research.outbound.errors import ConnectFailed, TimedOut, TransferFailed

# A server that closed a kept connection: the request never reached it, it may go again.
_CLOSED_WHILE_KEPT = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    headers: Message
    body: bytes


class KeptEndpoint:
    """POSTs to one base URL over a connection per thread, kept between requests."""

    def __init__(self, base_url: str, *, timeout: float, headers: dict[str, str]) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http or https URL: {base_url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.headers = {**headers, "Content-Type": "application/json"}
        self._local = threading.local()

    @staticmethod
    def usable(base_url: str) -> bool:
        """False where a proxy from the environment applies: the openai client's httpx would
        go through it, and this connection would not."""
        parts = urlsplit(base_url)
        proxies = urllib.request.getproxies()
        if not (proxies.get(parts.scheme) or proxies.get("all")):
            return True
        return bool(urllib.request.proxy_bypass(parts.hostname or ""))

    def post(self, path: str, body: bytes) -> Answer:
        connection, kept = self._connection()
        while True:
            try:
                return self._exchange(connection, path, body)
            except _CLOSED_WHILE_KEPT as error:
                connection.close()
                if not kept:
                    raise TransferFailed(type(error).__name__, str(error)) from None
            # Closed while kept: once more, on a new connection (which is not kept).
            connection, kept = self._connection()

    def _exchange(self, connection: http.client.HTTPConnection, path: str, body: bytes) -> Answer:
        try:
            connection.request("POST", self.prefix + path, body=body, headers=self.headers)
            response = connection.getresponse()
            data = response.read()
        except _CLOSED_WHILE_KEPT:
            raise
        except TimeoutError as error:  # socket.timeout is TimeoutError
            connection.close()
            raise TimedOut(type(error).__name__, str(error) or "timed out") from None
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            raise TransferFailed(type(error).__name__, str(error)) from None
        if response.will_close:
            connection.close()
        return Answer(response.status, response.reason, response.headers, data)

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, and whether it is kept from an earlier request."""
        connection = getattr(self._local, "connection", None)
        if connection is not None and connection.sock is not None:
            return connection, True
        if connection is None:
            connection = self._new()
            self._local.connection = connection
        try:
            connection.connect()
        except TimeoutError as error:
            connection.close()
            raise TimedOut(type(error).__name__, str(error) or "timed out") from None
        except OSError as error:  # refused, unreachable, no such host, a TLS handshake
            connection.close()
            raise ConnectFailed(self.host, self.port, str(error), type(error).__name__) from None
        return connection, False

    def _new(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout, context=_tls()
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)


@cache
def _tls() -> ssl.SSLContext:
    """The TLS the openai client's httpx2 verifies with, built by httpx2 itself (SSL_CERT_FILE
    or SSL_CERT_DIR from the environment, else the system's). A handshake it fails all the
    same (a client certificate the operator configured) hands the endpoint to the openai
    client for good (agents.llm.openai_client)."""
    return httpx2.create_ssl_context()
