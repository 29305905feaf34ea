"""read_page: fetch one web page and give the model its main text, without letting a model
(or a page it reads) turn the server into a proxy to the private network.

The guard is research.outbound's, on its "pages" client: only http and https; every host is
resolved and refused when any of its addresses is not public (loopback, private, link-local,
metadata, ...) when a connection opens, for the first request and for every redirect hop,
which are followed here by hand; the socket goes to an address that was checked, so a DNS
answer that changes between the check and the connection (rebinding) cannot send it
elsewhere, and no proxy from the environment is used. Hosts in
settings.READ_PAGE_ALLOWED_HOSTS skip the address check (tests, intranets). Here the
guard's neutral errors are worded for the model.
"""

import hashlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from django.conf import settings
from pydantic import Field

from agents.tools.base import ToolError, truncate
from agents.tools.tool import tool
from research import outbound
from research.models import Source
from research.services.sources import source_record
from research.text import UnreadableFile, declared_charset, decode, html_text, pdf_text

if TYPE_CHECKING:
    from agents.runtime.context import AgentContext

MAX_REDIRECTS = 5
REDIRECT_STATUSES = {301, 302, 303, 307, 308}
USER_AGENT = "Mozilla/5.0 (compatible; CanopyResearch/0.1; +read_page)"
HTML_TYPES = {"text/html", "application/xhtml+xml"}
TEXT_TYPES = {"application/json", "application/xml"}


# --- The address guard (research.outbound), worded for the model -------------------------


def parse_url(raw: str) -> outbound.URL:
    raw = raw.strip()
    try:
        return outbound.parse_url(raw)
    except outbound.BadURL as bad:
        raise ToolError(_bad_url(bad, raw)) from None


def _bad_url(bad: outbound.BadURL, raw: str) -> str:
    if bad.problem == "scheme":
        what = f"a {bad.scheme}:// URL" if bad.scheme else "a URL without http:// or https://"
        return f"read_page: only http and https URLs can be read, not {what}: {raw}"
    if bad.problem == "host":
        return f"read_page: the URL {raw} has no host."
    return f"read_page: {raw!r} is not a valid URL."


# --- Fetching ------------------------------------------------------------------------------


@dataclass
class Fetched:
    url: outbound.URL
    content_type: str
    charset: str
    body: bytes
    cut_note: str = ""


def _send(url: outbound.URL, *, redirected_from: str = "") -> Any:
    """GET `url` through the guard, which resolves the host and connects to a checked
    address only."""
    seconds = settings.READ_PAGE_TIMEOUT_SECONDS
    try:
        return outbound.send(
            "pages", "GET", url, timeout=seconds, stream=True, headers={"User-Agent": USER_AGENT}
        )
    except outbound.Unresolvable as failure:
        raise ToolError(
            f"read_page: the host {url.host} does not resolve ({failure.detail})."
        ) from None
    except outbound.Refused as refused:
        what = f"the redirect from {redirected_from} to {url}" if redirected_from else url
        raise ToolError(
            f"read_page: refused {what}: {refused.where}. read_page only reads public web pages."
        ) from None
    except outbound.ConnectFailed:
        raise ToolError(
            f"read_page: could not connect to {url.host} (port {outbound.port_of(url)})."
        ) from None
    except outbound.TimedOut:
        raise ToolError(f"read_page: {url} did not answer within {seconds:g} s.") from None
    except outbound.TransferFailed as error:
        raise ToolError(f"read_page: reading {url} failed ({error.detail}).") from None


def _content_type(url: outbound.URL, response: Any) -> str:
    """The media type, refused before the body is read unless read_page can read it."""
    media = response.headers.get("content-type", "").split(";")[0].strip().lower()
    readable = media in HTML_TYPES | TEXT_TYPES | {"application/pdf", ""}
    if not (readable or media.startswith("text/")):
        raise ToolError(
            f"read_page: {url} is {media}, which read_page cannot read "
            "(it reads HTML, PDF and plain text)."
        )
    return media


def _read_body(
    ctx: "AgentContext", url: outbound.URL, response: Any, deadline: float
) -> tuple[bytes, str]:
    """The body up to READ_PAGE_MAX_BYTES, and a note when it was cut."""
    try:
        return _read_capped(ctx, response, deadline)
    except outbound.TimedOut:
        seconds = settings.READ_PAGE_TIMEOUT_SECONDS
        raise ToolError(f"read_page: {url} stopped sending for {seconds:g} s.") from None
    except outbound.TransferFailed as error:
        raise ToolError(f"read_page: {url} broke off while being read ({error.detail}).") from None


def _read_capped(ctx: "AgentContext", response: Any, deadline: float) -> tuple[bytes, str]:
    limit = settings.READ_PAGE_MAX_BYTES
    body = bytearray()
    # iter_bytes decompresses chunk by chunk, so the cap bounds what is held, not what is sent.
    for chunk in outbound.chunks(response):
        ctx.cancel.check()
        if len(body) + len(chunk) > limit:
            body += chunk[: limit - len(body)]
            return bytes(body), f"the page was cut at {_size(limit)} (READ_PAGE_MAX_BYTES)"
        body += chunk
        if time.monotonic() > deadline:
            seconds = settings.READ_PAGE_TIMEOUT_SECONDS
            note = f"the download was stopped after {seconds:g} s, at {_size(len(body))}"
            return bytes(body), note
    return bytes(body), ""


def _size(count: int) -> str:
    if count >= 1024 * 1024:
        return f"{count / (1024 * 1024):g} MB"
    return f"{count:,} bytes"


def _next_url(url: outbound.URL, location: str) -> outbound.URL:
    try:
        target = outbound.join(url, location)
    except outbound.BadURL:
        raise ToolError(f"read_page: {url} redirects to an invalid URL: {location!r}") from None
    return parse_url(str(target))


def fetch(ctx: "AgentContext", url: outbound.URL) -> Fetched:
    deadline = time.monotonic() + settings.READ_PAGE_TIMEOUT_SECONDS
    redirected_from = ""
    for _hop in range(MAX_REDIRECTS + 1):
        response = _send(url, redirected_from=redirected_from)
        try:
            location = response.headers.get("location")
            if response.status_code in REDIRECT_STATUSES and location:
                redirected_from, url = str(url), _next_url(url, location)
                continue
            if response.status_code >= 400:
                raise ToolError(f"read_page: {url} answered {response.status_code}.")
            media = _content_type(url, response)
            body, cut_note = _read_body(ctx, url, response, deadline)
            return Fetched(url, media, response.charset_encoding or "", body, cut_note)
        finally:
            response.close()
    raise ToolError(f"read_page: {url} redirected more than {MAX_REDIRECTS} times; gave up.")


# --- Extraction ----------------------------------------------------------------------------


def extract_pdf(page: Fetched) -> tuple[str, str]:
    try:
        return pdf_text(page.body)
    except UnreadableFile as error:
        cut = f" ({page.cut_note})" if page.cut_note else ""
        raise ToolError(
            f"read_page: the PDF at {page.url} could not be read{cut}: {error}"
        ) from None


def extract(page: Fetched) -> tuple[str, str]:
    """(title, main text) of the page, by its media type (sniffed when the server sent none)."""
    media = page.content_type
    if not media:
        head = page.body[:1024].lstrip().lower()
        media = "application/pdf" if head.startswith(b"%pdf") else "text/html"
    if media in HTML_TYPES:
        # A page cut at the size limit may end inside a character: replace it, not re-read
        # the whole page as Latin-1.
        charset = page.charset or declared_charset(page.body) or "utf-8"
        return html_text(page.body, url=str(page.url), charset=charset)
    if media == "application/pdf":
        return extract_pdf(page)
    return "", decode(page.body, page.charset or "utf-8").strip()


# --- The tool ------------------------------------------------------------------------------


def _default_title(url: outbound.URL) -> str:
    return url.path.rstrip("/").rsplit("/", 1)[-1] or url.host


def format_page(*, title: str, url: str, final_url: str, text: str, cut_note: str) -> str:
    lines = [f"Title: {title}", f"URL: {final_url}"]
    if final_url != url:
        lines.append(f"(redirected from {url})")
    if cut_note:
        lines.append(f"Note: {cut_note}; the text below is its beginning.")
    text = text or "(no readable text on this page)"
    return "\n".join(lines) + "\n\n" + truncate(text, settings.RESEARCH_TOOL_RESULT_MAX_CHARS)


@tool(state="reading", parallel=True, detail=lambda args: str(args.get("url", "")))
def read_page(
    ctx: "AgentContext",
    url: Annotated[
        str,
        Field(
            min_length=1,
            max_length=2000,
            description="The full http:// or https:// URL of the page.",
        ),
    ],
) -> str:
    """Read a web page (HTML, PDF or plain text) by its http or https URL and return its
    title, final URL and main text. Cite the final URL it gives."""
    requested = url.strip()
    page = fetch(ctx, parse_url(requested))
    title, text = extract(page)
    title = title or _default_title(page.url)
    final_url = str(page.url)
    source_record(
        run_id=ctx.run_id,
        root_id=ctx.root_id,  # the agent knows its tree: no read of it
        kind=Source.Kind.PAGE,
        url=requested,
        final_url=final_url,
        title=title,
        text=text,
        sha256=hashlib.sha256(page.body).hexdigest(),
    )
    return format_page(
        title=title, url=requested, final_url=final_url, text=text, cut_note=page.cut_note
    )


READ_PAGE = read_page  # the name other modules import
