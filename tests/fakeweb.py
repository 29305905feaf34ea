"""A small local web for tests: pages, a SearXNG-style search API and an OpenAI-style
Responses API with web search, served by a threaded stdlib HTTP server on 127.0.0.1.

    with FakeWeb() as web:
        web.url                 # "http://127.0.0.1:<port>"
        web.host                # "127.0.0.1:<port>" (for READ_PAGE_ALLOWED_HOSTS)
        web.requests            # every request line it answered, e.g. "GET /article"
        web.posted              # the JSON bodies of the POSTs it got, in order
        web.add_page("/notes", "<html>...</html>", title="Notes")   # more searchable pages

Routes:
    /search?q=...&format=json   SearXNG JSON: {"query", "results": [{"title", "url",
                                "content", "engine"}]}, the pages sharing a word with q
    /v1/responses (POST)        OpenAI Responses API: an answer listing the matching pages,
                                each cited with a url_citation annotation (base_url .../v1)
    /article                    HTML: nav, header and footer boilerplate around an article
    /doc.pdf                    a one-page PDF whose text is PDF_TEXT
    /notes.txt                  plain text
    /redirect-article           302 to /article
    /redirect-private           302 to http://10.0.0.1/
    /redirect-loop              302 to itself
    /huge                       50 MB of HTML, streamed (never held in memory); its first
                                n bytes are huge_body(n)
    /slow?seconds=N             waits N seconds, then a short HTML page
    /status/<code>              an empty answer with that status
    /broken-search              500 (use it as a search provider's URL: /broken-search/search)
    anything else               404
"""

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

ARTICLE_TEXT = [
    "The river otter returned to the valley in the spring of 2019, after forty years away.",
    "Biologists counted eleven otters along the lower reach, where the water runs clean again "
    "since the old tannery closed and the weir was removed.",
    "The otters feed mostly on crayfish and eels; their return is read as a sign that the "
    "whole food web of the river has recovered, not just its chemistry.",
    "Volunteers now walk the banks every month and log spraints, the droppings that show "
    "where an otter has marked its territory.",
]
ARTICLE_TITLE = "Otters return to the valley"
NAV_TEXT = "Home | Subscribe to our newsletter | Shop"
FOOTER_TEXT = "Copyright 2024 Valley Gazette. All rights reserved. Cookie settings."
PDF_TEXT = "Annual otter census: eleven animals counted"
PDF_TITLE = "Otter census"
NOTES_TEXT = "Field notes: otter tracks seen near the mill at dawn."
HUGE_BYTES = 50 * 1024 * 1024
_HUGE_HEAD = b"<!doctype html><html><head><title>Huge</title></head><body>"
_HUGE_CHUNK = b"<p>" + b"lorem ipsum dolor sit amet " * 2400 + b"</p>\n"


def huge_chunks(limit: int = HUGE_BYTES) -> Iterator[bytes]:
    """The /huge body, piece by piece, `limit` bytes in all."""
    sent, piece = 0, _HUGE_HEAD
    while sent < limit:
        piece = piece[: limit - sent]
        yield piece
        sent += len(piece)
        piece = _HUGE_CHUNK


def huge_body(size: int) -> bytes:
    """The first `size` bytes of /huge (a test can hash what read_page kept)."""
    return b"".join(huge_chunks(size))


def article_html() -> str:
    paragraphs = "\n".join(f"<p>{text}</p>" for text in ARTICLE_TEXT)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{ARTICLE_TITLE} | Valley Gazette</title></head>
<body>
<nav><a href="/">Home</a> | <a href="/subscribe">Subscribe to our newsletter</a> |
<a href="/shop">Shop</a></nav>
<header><div class="logo">Valley Gazette</div><div>{NAV_TEXT}</div></header>
<main><article>
<h1>{ARTICLE_TITLE}</h1>
{paragraphs}
</article></main>
<footer><p>{FOOTER_TEXT}</p><p>Follow us: Facebook, Twitter, Instagram</p></footer>
</body></html>"""


def pdf_bytes(text: str = PDF_TEXT, title: str = PDF_TITLE) -> bytes:
    """A valid one-page PDF showing `text` (ASCII, no parentheses), built by hand."""
    stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        f"<< /Title ({title}) >>".encode(),
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info 6 0 R >>\n" % (len(objects) + 1)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


@dataclass
class Page:
    body: bytes
    content_type: str
    title: str
    # What search matches and shows as the snippet.
    text: str


class FakeWeb:
    """The server; a context manager. Pages can be added before or while it runs."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.posted: list[dict] = []
        # How many /slow requests were answered at once, at the most (parallel tool calls).
        self.most_in_flight = 0
        # When each /slow request began and ended (time.monotonic), by its `page` parameter.
        self.slow_spans: dict[str, tuple[float, float]] = {}
        self._in_flight = 0
        self._gauge = threading.Lock()
        self.pages: dict[str, Page] = {}
        self.add_page("/article", article_html(), title=ARTICLE_TITLE, text=" ".join(ARTICLE_TEXT))
        self.add_page(
            "/doc.pdf", pdf_bytes(), content_type="application/pdf", title=PDF_TITLE, text=PDF_TEXT
        )
        self.add_page("/notes.txt", NOTES_TEXT, content_type="text/plain", title="Field notes")
        self._server: ThreadingHTTPServer | None = None

    def add_page(
        self,
        path: str,
        body: str | bytes,
        *,
        content_type: str = "text/html; charset=utf-8",
        title: str = "",
        text: str = "",
    ) -> None:
        data = body.encode() if isinstance(body, str) else body
        searchable = text or (body if isinstance(body, str) else "")
        self.pages[path] = Page(data, content_type, title or path, searchable)

    @property
    def port(self) -> int:
        assert self._server is not None, "use FakeWeb as a context manager"
        return self._server.server_address[1]

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def search(self, query: str) -> list[tuple[str, Page]]:
        """The pages sharing a word (3+ letters) with the query, most shared words first."""
        words = {word for word in query.lower().split() if len(word) >= 3}
        scored = []
        for path, page in self.pages.items():
            haystack = f"{page.title} {page.text}".lower()
            score = sum(word in haystack for word in words)
            if score:
                scored.append((-score, path, page))
        return [(path, page) for _, path, page in sorted(scored, key=lambda item: item[:2])]

    def __enter__(self) -> "FakeWeb":
        handler = type("Handler", (_Handler,), {"web": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        # A short poll interval: shutdown() waits for it, at every test teardown.
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    web: FakeWeb
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without this, a kept-alive connection waits
    # for the client's delayed ACK (40 ms) before the body (Nagle's algorithm).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib's name
        pass  # keep test output clean

    def do_GET(self) -> None:  # noqa: N802 - stdlib's name
        self.web.requests.append(f"GET {self.path}")
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        path = parts.path
        try:
            if path in self.web.pages:
                page = self.web.pages[path]
                self._send(200, page.body, page.content_type)
            elif path == "/search":
                self._searxng(query)
            elif path == "/redirect-article":
                self._redirect("/article")
            elif path == "/redirect-private":
                self._redirect("http://10.0.0.1/")
            elif path == "/redirect-loop":
                self._redirect("/redirect-loop")
            elif path == "/huge":
                self._huge()
            elif path == "/slow":
                self._slow(float(query.get("seconds", ["5"])[0]), query.get("page", [""])[0])
            elif path.startswith("/status/"):
                self._send(int(path.rsplit("/", 1)[1]), b"", "text/plain")
            elif path.startswith("/broken-search"):
                self._send(500, b"Internal Server Error", "text/plain")
            else:
                self._send(404, b"not found", "text/plain")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading (read_page's size cap): expected

    def _slow(self, seconds: float, page: str) -> None:
        began = time.monotonic()
        with self.web._gauge:
            self.web._in_flight += 1
            self.web.most_in_flight = max(self.web.most_in_flight, self.web._in_flight)
        try:
            time.sleep(seconds)
        finally:
            with self.web._gauge:
                self.web._in_flight -= 1
                self.web.slow_spans[page] = (began, time.monotonic())
        self._send(200, b"<html><body><p>Finally.</p></body></html>", "text/html")

    def do_POST(self) -> None:  # noqa: N802 - stdlib's name
        self.web.requests.append(f"POST {self.path}")
        length = int(self.headers.get("Content-Length") or 0)
        payload = json.loads(self.rfile.read(length) or b"{}")
        self.web.posted.append(payload)
        if urlsplit(self.path).path.endswith("/responses"):
            self._send_json(200, self._responses(payload))
        elif self.path.startswith("/broken-search"):
            self._send(500, b"Internal Server Error", "text/plain")
        else:
            self._send(404, b"not found", "text/plain")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_json(self, status: int, data: object) -> None:
        self._send(status, json.dumps(data).encode(), "application/json")

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _searxng(self, query: dict[str, list[str]]) -> None:
        if query.get("format") != ["json"]:
            self._send(403, b"format=json is required", "text/plain")
            return
        q = query.get("q", [""])[0]
        results = [
            {
                "title": page.title,
                "url": self.web.url + path,
                "content": page.text[:200],
                "engine": "fakeweb",
            }
            for path, page in self.web.search(q)
        ]
        self._send_json(200, {"query": q, "number_of_results": len(results), "results": results})

    def _huge(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(HUGE_BYTES))
        self.end_headers()
        for piece in huge_chunks():
            self.wfile.write(piece)

    def _responses(self, payload: dict) -> dict:
        """A Responses API answer citing the pages that match the request's input."""
        text, annotations = "", []
        for number, (path, page) in enumerate(self.web.search(str(payload.get("input", ""))), 1):
            url = self.web.url + path
            line = f"{number}. {page.title}: {page.text[:120]} "
            link = f"([{page.title}]({url}))"
            start = len(text) + len(line)
            annotations.append(
                {
                    "type": "url_citation",
                    "url": url,
                    "title": page.title,
                    "start_index": start,
                    "end_index": start + len(link),
                }
            )
            text += line + link + "\n"
        message = {
            "type": "message",
            "id": "msg_fake",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": annotations}],
        }
        return {
            "id": "resp_fake",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": payload.get("model", ""),
            "output": [
                {"type": "web_search_call", "id": "ws_fake", "status": "completed"},
                message,
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": payload.get("tools", []),
            "usage": {"input_tokens": 10, "output_tokens": len(text) // 4, "total_tokens": 0},
        }
