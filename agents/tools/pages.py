"""read_page: fetch one web page and give the model its main text, without letting a model
(or a page it reads) turn the server into a proxy to the private network.

The guard: only http and https; every host is resolved and refused when any of its addresses
is not public (loopback, private, link-local, metadata, ...), before the first request and
again for every redirect hop, which are followed here by hand. The request then goes to the
address that was checked (the URL's host swapped for the IP, the Host header and TLS server
name kept), so a DNS answer that changes between the check and the connection (rebinding)
cannot send it elsewhere. It connects directly (no proxy from the environment) for the same
reason. Hosts in settings.READ_PAGE_ALLOWED_HOSTS skip the address check (tests, intranets).
"""

import hashlib
import ipaddress
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import httpx
from django.conf import settings
from pydantic import Field

from agents.tools.base import ToolError, truncate
from agents.tools.tool import tool
from research import outbound
from research.models import Source
from research.outbound import IPAddress
from research.services.sources import source_record
from research.text import UnreadableFile, declared_charset, decode, html_text, pdf_text

if TYPE_CHECKING:
    from agents.runtime.context import AgentContext

MAX_REDIRECTS = 5
REDIRECT_STATUSES = {301, 302, 303, 307, 308}
DEFAULT_PORTS = {"http": 80, "https": 443}
USER_AGENT = "Mozilla/5.0 (compatible; CanopyResearch/0.1; +read_page)"
HTML_TYPES = {"text/html", "application/xhtml+xml"}
TEXT_TYPES = {"application/json", "application/xml"}


# --- The address guard ---------------------------------------------------------------------


def parse_url(raw: str) -> httpx.URL:
    raw = raw.strip()
    try:
        url = httpx.URL(raw)
    except httpx.InvalidURL:
        raise ToolError(f"read_page: {raw!r} is not a valid URL.") from None
    if url.scheme not in DEFAULT_PORTS:
        what = f"a {url.scheme}:// URL" if url.scheme else "a URL without http:// or https://"
        raise ToolError(f"read_page: only http and https URLs can be read, not {what}: {raw}")
    if not url.host:
        raise ToolError(f"read_page: the URL {raw} has no host.")
    return url


def _port(url: httpx.URL) -> int:
    return url.port or DEFAULT_PORTS[url.scheme]


def host_allowed(url: httpx.URL) -> bool:
    return outbound.host_allowed(url.host, _port(url))


class Unresolvable(ToolError):
    """The host did not resolve: a DNS failure may pass, unlike an address refused."""


def resolve(url: httpx.URL) -> list[IPAddress]:
    """The host's addresses, IPv4 first (many servers have no IPv6 route)."""
    host = url.raw_host.decode("ascii")
    try:
        infos = socket.getaddrinfo(host, _port(url), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise Unresolvable(f"read_page: the host {url.host} does not resolve ({error}).") from None
    addresses: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if address not in addresses:
            addresses.append(address)
    return sorted(addresses, key=lambda address: address.version)


def checked_addresses(url: httpx.URL, *, redirected_from: str = "") -> list[IPAddress]:
    """Resolve the host and refuse it unless every address is public (or the host allowed)."""
    addresses = resolve(url)
    if host_allowed(url):
        return addresses
    if where := outbound.refused_address(url.host, addresses):
        what = f"the redirect from {redirected_from} to {url}" if redirected_from else url
        raise ToolError(
            f"read_page: refused {what}: {where}. read_page only reads public web pages."
        )
    return addresses


# --- Fetching ------------------------------------------------------------------------------


@dataclass
class Fetched:
    url: httpx.URL
    content_type: str
    charset: str
    body: bytes
    cut_note: str = ""


def _send(client: httpx.Client, url: httpx.URL, addresses: list[IPAddress]) -> httpx.Response:
    """GET `url` from the first checked address that accepts the connection."""
    extensions = {"sni_hostname": url.raw_host.decode("ascii")} if url.scheme == "https" else {}
    headers = {"Host": url.netloc.decode("ascii")}
    for address in addresses:
        request = client.build_request(
            "GET", url.copy_with(host=str(address)), headers=headers, extensions=extensions
        )
        try:
            return client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout):
            continue
        except httpx.TimeoutException:
            raise ToolError(
                f"read_page: {url} did not answer within {settings.READ_PAGE_TIMEOUT_SECONDS:g} s."
            ) from None
        except httpx.HTTPError as error:
            raise ToolError(f"read_page: reading {url} failed ({error}).") from None
    raise ToolError(f"read_page: could not connect to {url.host} (port {_port(url)}).")


def _content_type(url: httpx.URL, response: httpx.Response) -> str:
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
    ctx: "AgentContext", url: httpx.URL, response: httpx.Response, deadline: float
) -> tuple[bytes, str]:
    """The body up to READ_PAGE_MAX_BYTES, and a note when it was cut."""
    try:
        return _read_capped(ctx, response, deadline)
    except httpx.TimeoutException:
        seconds = settings.READ_PAGE_TIMEOUT_SECONDS
        raise ToolError(f"read_page: {url} stopped sending for {seconds:g} s.") from None
    except httpx.HTTPError as error:
        raise ToolError(f"read_page: {url} broke off while being read ({error}).") from None


def _read_capped(
    ctx: "AgentContext", response: httpx.Response, deadline: float
) -> tuple[bytes, str]:
    limit = settings.READ_PAGE_MAX_BYTES
    body = bytearray()
    # iter_bytes decompresses chunk by chunk, so the cap bounds what is held, not what is sent.
    for chunk in response.iter_bytes():
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


def _next_url(url: httpx.URL, location: str) -> httpx.URL:
    try:
        target = url.join(location)
    except httpx.InvalidURL:
        raise ToolError(f"read_page: {url} redirects to an invalid URL: {location!r}") from None
    return parse_url(str(target))


def _client() -> httpx.Client:
    return httpx.Client(
        timeout=settings.READ_PAGE_TIMEOUT_SECONDS,
        follow_redirects=False,  # each hop goes through the address guard
        trust_env=False,  # a proxy would connect to addresses the guard never saw
        headers={"User-Agent": USER_AGENT},
    )


def fetch(ctx: "AgentContext", url: httpx.URL) -> Fetched:
    deadline = time.monotonic() + settings.READ_PAGE_TIMEOUT_SECONDS
    addresses = checked_addresses(url)
    with _client() as client:
        for _hop in range(MAX_REDIRECTS + 1):
            response = _send(client, url, addresses)
            try:
                location = response.headers.get("location")
                if response.status_code in REDIRECT_STATUSES and location:
                    previous, url = url, _next_url(url, location)
                    addresses = checked_addresses(url, redirected_from=str(previous))
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


def _default_title(url: httpx.URL) -> str:
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
