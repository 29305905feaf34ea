"""Kept-alive HTTP/1.1 connections to one endpoint the operator configured (the model's): one
POST of bytes already serialised, the answer's status, headers and bytes.

The model call is an agent's hottest outbound request. A call takes an idle connection of the
process (the one most recently given back) or opens one, and gives it back after its answer:
an agent's calls, and the next agent's after it ends, go over connections already open. (A
connection per thread had every new agent open its own on the way to its first call: a TCP
connect, and against a real endpoint a TLS handshake; and left it for the collector to close
when its thread ended.) No URL objects, no request model built per call: the
request's head (its line and headers) is written once per path, so a call sends that head,
the body's length and the body in one write; the answer is read by httptools' parser (llhttp,
in C: chunked bodies, interim 1xx answers, keep-alive), its headers left as bytes unless an
error needs them. The standard library's http.client formatted and checked every header, and
parsed the answer's with the email package, at every call: most of the call's own CPU (issue
25, round seventeen).

An idle connection is checked as it is taken (one poll, no wait): one the server closed, or
that has bytes nobody asked for, or that sat idle over a minute, is closed and the next taken.
A connection the server closes as the request goes fails at its first use; the request then
goes once more on a new connection. (A server that died while answering looks the same and gets
the request twice; the openai client retries a lost connection too.) Anything else is raised
in this package's neutral words (ConnectFailed, TimedOut, TransferFailed), once: the caller
(agents.llm.openai_client) decides about retries.

Not for guarded purposes: it connects where the URL says, with no address check, like the
openai client it stands in front of (the operator chose the endpoint).
"""

import re
import select
import socket
import ssl
import time
import urllib.request
from dataclasses import dataclass
from functools import cache, cached_property
from urllib.parse import urlsplit

import httptools
import httpx2

from research.outbound.errors import ConnectFailed, TimedOut, TransferFailed

_READ_BYTES = 64 * 1024
# Idle connections kept beyond this many (after a burst of agents) are closed.
_MOST_IDLE = 256
# One idle longer than this is not used again: a NAT or a proxy between may have dropped it
# without a word, and the call would wait its whole timeout.
_IDLE_SECONDS = 60.0
# A header's name (RFC 9110's token), and what its value may not hold: it would end the
# header, or the head.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_NOT_IN_A_HEADER = re.compile(r"[\r\n\0]")


class _ClosedUnanswered(ConnectionError):
    """The server closed the connection before the first byte of an answer."""


# A server that closed a kept connection: the request never reached it, it may go again.
_CLOSED_WHILE_KEPT = (_ClosedUnanswered, ConnectionResetError, BrokenPipeError)


@dataclass
class _Connection:
    sock: socket.socket
    buffer: bytearray  # what an answer is read into
    idle_since: float = 0.0  # time.monotonic() when it was given back


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    raw_headers: tuple[tuple[bytes, bytes], ...]
    body: bytes

    @cached_property
    def headers(self) -> httpx2.Headers:
        """The headers as the openai client reads them (its retry decision, its wait): made
        only for an answer that needs them, not for every success."""
        return httpx2.Headers(list(self.raw_headers))


class KeptEndpoint:
    """POSTs to one base URL over the process's kept connections, one request on each at a
    time. Thread-safe."""

    def __init__(self, base_url: str, *, timeout: float, headers: dict[str, str]) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http or https URL: {base_url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.headers = {
            "Host": _host_header(self.host, self.port, parts.scheme),
            "Accept-Encoding": "identity",  # the body is read as it comes
            **headers,
            "Content-Type": "application/json",
        }
        # What http.client refused at every call (with an exception no caller expected) is
        # refused once, here, in words the caller can pass on.
        if not _sendable(self.prefix, "ascii") or re.search(r"[\s\0]", self.prefix):
            raise ValueError(f"its path {self.prefix!r} is not plain ASCII without spaces")
        for name, value in self.headers.items():
            if not _TOKEN.fullmatch(name) or _NOT_IN_A_HEADER.search(value) or not _sendable(value):
                what = "API key" if name == "Authorization" else f"{name} header"
                raise ValueError(
                    f"its {what} holds a character HTTP cannot carry "
                    "(a line break, or a letter outside Latin-1)"
                )
        self._heads: dict[str, bytes] = {}
        # Connections given back after their answer, the most recent last. A list's append
        # and pop are atomic: no lock is needed to take or give one back.
        self._idle: list[_Connection] = []

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
        request = b"".join([self._head(path), str(len(body)).encode(), b"\r\n\r\n", body])
        connection, kept = self._take()
        while True:
            try:
                return self._exchange(connection, request)
            except _CLOSED_WHILE_KEPT as error:
                connection.sock.close()
                if not kept:
                    raise TransferFailed(type(error).__name__, str(error)) from None
            # Closed while kept: once more, on a new connection (which is not kept).
            connection, kept = self._connect(), False

    def _head(self, path: str) -> bytes:
        """The request's line and headers, up to the body's length, written once per path."""
        head = self._heads.get(path)
        if head is None:
            lines = [f"POST {self.prefix}{path} HTTP/1.1"]
            lines += [f"{name}: {value}" for name, value in self.headers.items()]
            text = "\r\n".join(lines) + "\r\nContent-Length: "
            head = self._heads[path] = text.encode("latin-1")  # as http.client encodes it
        return head

    def _exchange(self, connection: _Connection, request: bytes) -> Answer:
        """The request and its answer; the connection is given back after an answer that
        keeps it alive, closed otherwise (a connection closed while kept is the caller's)."""
        sock, buffer = connection.sock, connection.buffer
        reading = _Reading()
        try:
            sock.sendall(request)
            while not reading.complete:
                read = sock.recv_into(buffer)
                if not read:
                    reading.ended()
                    break
                reading.feed(memoryview(buffer)[:read])
        except _CLOSED_WHILE_KEPT:
            raise
        except TimeoutError as error:  # socket.timeout is TimeoutError
            sock.close()
            raise TimedOut(type(error).__name__, str(error) or "timed out") from None
        except (OSError, httptools.HttpParserError, httptools.HttpParserUpgrade) as error:
            sock.close()
            if reading.complete:  # what the server sent after its answer is dropped
                return reading.answer()
            raise TransferFailed(type(error).__name__, str(error)) from None
        except BaseException:  # the connection is in the middle of an answer: never reused
            sock.close()
            raise
        finally:
            del reading.parser  # the parser and its reader refer to each other
        if reading.keep_alive and len(self._idle) < _MOST_IDLE:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            sock.close()
        return reading.answer()

    def _take(self) -> tuple[_Connection, bool]:
        """An idle connection (the most recently given back), or a new one; and whether it
        was kept from an earlier request. An idle connection with something to read is not
        used: the server closed it meanwhile, or sent bytes nobody asked for, which would
        be read as this request's answer. Nor is one idle too long."""
        while True:
            try:
                connection = self._idle.pop()
            except IndexError:
                return self._connect(), False
            fresh = time.monotonic() - connection.idle_since < _IDLE_SECONDS
            if fresh and not _readable(connection.sock):
                return connection, True
            connection.sock.close()

    def _connect(self) -> _Connection:
        try:
            return _Connection(self._open(), bytearray(_READ_BYTES))
        except TimeoutError as error:
            raise TimedOut(type(error).__name__, str(error) or "timed out") from None
        except OSError as error:  # refused, unreachable, no such host, a TLS handshake
            raise ConnectFailed(self.host, self.port, str(error), type(error).__name__) from None

    def _open(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # the body goes at once
            if self.scheme == "https":
                return _tls().wrap_socket(sock, server_hostname=self.host)
            return sock
        except BaseException:
            sock.close()
            raise


class _Reading:
    """One answer as httptools' parser reads it; the parser calls the `on_` methods."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.started = False
        self.result: Answer | None = None
        self.keep_alive = False
        self._next()

    @property
    def complete(self) -> bool:
        return self.result is not None

    def _next(self) -> None:
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.headers_done = False

    def feed(self, data: memoryview) -> None:
        self.parser.feed_data(data)

    def ended(self) -> None:
        """The server closed the connection: before an answer, the request may go again; in
        an answer whose length is its end (no length, not chunked), the answer is complete."""
        if not self.started:
            raise _ClosedUnanswered("the server closed the connection without an answer")
        names = {name.lower() for name, _ in self.headers}
        if self.headers_done and not ({b"content-length", b"transfer-encoding"} & names):
            self._complete()
            return
        raise ConnectionError("the server closed the connection in the middle of its answer")

    def answer(self) -> Answer:
        assert self.result is not None
        return self.result

    def _complete(self) -> None:
        self.result = Answer(
            self.parser.get_status_code(),
            self.reason.decode("latin-1"),
            tuple(self.headers),
            b"".join(self.body),
        )

    # The parser's callbacks. What comes after the answer (bytes the server sent unasked) is
    # dropped with the connection, whether the parser reads it as another message or fails.

    def on_message_begin(self) -> None:
        self.started = True
        self.keep_alive = False
        self._next()

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.complete:
            return
        if 100 <= self.parser.get_status_code() < 200:
            self._next()  # an interim answer (103 Early Hints): the final one follows
            return
        self._complete()
        self.keep_alive = self.parser.should_keep_alive()


def _readable(sock: socket.socket) -> bool:
    """Whether the socket has something to read (or has been closed), without waiting."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _sendable(text: str, encoding: str = "latin-1") -> bool:
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


def _host_header(host: str, port: int, scheme: str) -> str:
    """The Host header as http.client writes it: IDNA, an IPv6 address in brackets, the port
    only when it is not the scheme's."""
    if ":" in host:
        name = f"[{host}]"
    else:
        name = host if host.isascii() else host.encode("idna").decode("ascii")
    default = 443 if scheme == "https" else 80
    return name if port == default else f"{name}:{port}"


@cache
def _tls() -> ssl.SSLContext:
    """The TLS the openai client's httpx2 verifies with, built by httpx2 itself (SSL_CERT_FILE
    or SSL_CERT_DIR from the environment, else the system's). A handshake it fails all the
    same (a client certificate the operator configured) hands the endpoint to the openai
    client for good (agents.llm.openai_client)."""
    return httpx2.create_ssl_context()
