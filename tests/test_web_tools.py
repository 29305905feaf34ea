"""web_search and read_page against a real local web server (tests.fakeweb) and PostgreSQL.

Every socket this module opens is watched through a Python audit hook, and any connection
outside 127.0.0.0/8 is blocked and recorded: no test can reach the internet or the private
network, and the refusal tests can prove that read_page refused before connecting.
"""

import hashlib
import importlib.util
import ipaddress
import socket
import sys

import pytest
from django.contrib.auth.models import User

from agents.runtime.context import AgentContext, CancelToken
from agents.tools.base import ToolError
from agents.tools.pages import READ_PAGE
from agents.tools.web import WEB_SEARCH
from research.models import Source
from research.outbound import not_public
from research.services import run_start
from tests import fakeweb
from tests.conftest import manage_check
from tests.fakeweb import FakeWeb


class _Connections:
    """The addresses sockets connected to while a test ran (None: not watching)."""

    seen: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if event != "socket.connect" or _Connections.seen is None:
        return
    address = args[1]
    if not isinstance(address, tuple):
        return  # a Unix socket
    host = str(address[0])
    _Connections.seen.append(host)
    if not ipaddress.ip_address(host.split("%")[0]).is_loopback:
        raise ConnectionRefusedError(f"test guard: no connection outside loopback ({host})")


sys.addaudithook(_audit)


@pytest.fixture(autouse=True)
def connections():
    _Connections.seen = []
    yield _Connections.seen
    _Connections.seen = None


@pytest.fixture
def web():
    with FakeWeb() as server:
        yield server


@pytest.fixture
def ctx(db) -> AgentContext:
    alice = User.objects.create_user("alice", password="x")
    run = run_start(owner=alice, topic="otters in the valley")
    return AgentContext.load(run.pk, CancelToken(run.pk))


@pytest.fixture
def allowed(settings, web):
    settings.READ_PAGE_ALLOWED_HOSTS = [web.host]
    return web


def search(ctx: AgentContext, **args) -> str:
    return WEB_SEARCH.handler(ctx, args)


def read(ctx: AgentContext, url: str) -> str:
    return READ_PAGE.handler(ctx, {"url": url})


def refusal(ctx: AgentContext, url: str) -> str:
    with pytest.raises(ToolError) as caught:
        read(ctx, url)
    return str(caught.value)


# --- web_search --------------------------------------------------------------------------


def test_searxng_results_are_listed_and_recorded(ctx, web, settings):
    settings.SEARCH_PROVIDER = "searxng"
    settings.SEARXNG_URL = web.url

    result = search(ctx, query="otter census")

    assert result.startswith('3 results for "otter census":')
    assert f"1. {fakeweb.PDF_TITLE}\n   {web.url}/doc.pdf\n   {fakeweb.PDF_TEXT}" in result
    assert f"2. {fakeweb.ARTICLE_TITLE}\n   {web.url}/article" in result
    assert f"3. Field notes\n   {web.url}/notes.txt" in result
    rows = Source.objects.filter(run_id=ctx.run_id).order_by("id")
    assert [(row.kind, row.url, row.root_id) for row in rows] == [
        ("search", f"{web.url}/doc.pdf", ctx.root_id),
        ("search", f"{web.url}/article", ctx.root_id),
        ("search", f"{web.url}/notes.txt", ctx.root_id),
    ]
    assert rows[0].title == fakeweb.PDF_TITLE
    assert rows[0].snippet == fakeweb.PDF_TEXT
    assert "GET /search?q=otter+census&format=json" in web.requests


def test_max_results_caps_the_list(ctx, web, settings):
    settings.SEARCH_PROVIDER = "searxng"
    settings.SEARXNG_URL = web.url

    result = search(ctx, query="otter", max_results=1)

    assert result.startswith('1 result for "otter":')
    assert Source.objects.filter(run_id=ctx.run_id).count() == 1


def test_search_without_matches_says_so(ctx, web, settings):
    settings.SEARCH_PROVIDER = "searxng"
    settings.SEARXNG_URL = web.url

    assert search(ctx, query="zebra").startswith('No results for "zebra"')
    assert not Source.objects.exists()


def test_failing_provider_is_a_readable_tool_error(ctx, web, settings):
    settings.SEARCH_PROVIDER = "searxng"
    settings.SEARXNG_URL = f"{web.url}/broken-search"

    with pytest.raises(ToolError, match=r"^web_search: searxng answered 500$"):
        search(ctx, query="otter")
    assert not Source.objects.exists()


def test_unreachable_provider_is_a_readable_tool_error(ctx, settings):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.SEARCH_PROVIDER = "searxng"
    settings.SEARXNG_URL = f"http://127.0.0.1:{port}"

    with pytest.raises(ToolError, match=r"^web_search: searxng could not be reached \(Connect"):
        search(ctx, query="otter")


def test_unset_provider_says_search_is_not_configured(ctx, settings):
    settings.SEARCH_PROVIDER = ""

    result = search(ctx, query="otter")

    assert "web_search is not configured on this server" in result
    assert "SEARCH_PROVIDER" in result
    assert "searxng, tavily, brave, ddgs, openai" in result
    assert "knowledge base" in result
    assert not Source.objects.exists()


def test_provider_without_its_setting_names_the_setting(ctx, settings):
    settings.SEARCH_PROVIDER = "brave"
    settings.BRAVE_API_KEY = ""

    with pytest.raises(ToolError, match="brave is chosen but BRAVE_API_KEY is not set"):
        search(ctx, query="otter")


@pytest.mark.skipif(importlib.util.find_spec("ddgs") is not None, reason="ddgs is installed")
def test_ddgs_provider_without_the_package_says_so(ctx, settings):
    settings.SEARCH_PROVIDER = "ddgs"

    with pytest.raises(ToolError, match="the ddgs package is not installed"):
        search(ctx, query="otter")


def test_openai_provider_lists_the_cited_pages(ctx, web, settings):
    settings.SEARCH_PROVIDER = "openai"
    settings.OPENAI_BASE_URL = f"{web.url}/v1"
    settings.OPENAI_API_KEY = "test-key"

    result = search(ctx, query="otter census", max_results=3)

    assert result.startswith('3 results for "otter census":')
    assert f". {fakeweb.PDF_TITLE}\n   {web.url}/doc.pdf\n   " in result
    assert f". {fakeweb.ARTICLE_TITLE}\n   {web.url}/article\n   " in result
    assert fakeweb.PDF_TEXT in result  # the answer's words about the page, not the link
    assert "](" not in result
    request = web.posted[-1]
    assert request["tools"] == [{"type": "web_search"}]
    assert request["instructions"].startswith("You are the search engine of a research agent.")
    assert "otter census" in request["input"]
    urls = Source.objects.filter(run_id=ctx.run_id, kind="search").values_list("url", flat=True)
    assert {url.removeprefix(web.url) for url in urls} == {"/doc.pdf", "/article", "/notes.txt"}


# --- read_page: reading --------------------------------------------------------------------


def test_article_main_text_comes_back_without_boilerplate(ctx, allowed):
    url = f"{allowed.url}/article"

    result = read(ctx, url)

    assert result.startswith(f"Title: {fakeweb.ARTICLE_TITLE}\nURL: {url}\n\n")
    for paragraph in fakeweb.ARTICLE_TEXT:
        assert paragraph in result
    assert "Subscribe to our newsletter" not in result
    assert "All rights reserved" not in result
    page = Source.objects.get(run_id=ctx.run_id)
    assert (page.kind, page.url, page.final_url, page.root_id) == ("page", url, url, ctx.root_id)
    assert page.sha256 == hashlib.sha256(fakeweb.article_html().encode()).hexdigest()
    assert fakeweb.ARTICLE_TEXT[1] in page.text
    assert "All rights reserved" not in page.text


def test_pdf_text_comes_back(ctx, allowed):
    result = read(ctx, f"{allowed.url}/doc.pdf")

    assert result.startswith(f"Title: {fakeweb.PDF_TITLE}\nURL: {allowed.url}/doc.pdf\n")
    assert fakeweb.PDF_TEXT in result
    page = Source.objects.get(run_id=ctx.run_id)
    assert page.sha256 == hashlib.sha256(fakeweb.pdf_bytes()).hexdigest()


def test_plain_text_comes_back_as_is(ctx, allowed):
    result = read(ctx, f"{allowed.url}/notes.txt")

    assert result == f"Title: notes.txt\nURL: {allowed.url}/notes.txt\n\n{fakeweb.NOTES_TEXT}"


def test_redirect_is_followed_and_the_final_url_given(ctx, allowed):
    result = read(ctx, f"{allowed.url}/redirect-article")

    assert f"URL: {allowed.url}/article\n(redirected from {allowed.url}/redirect-article)" in result
    assert fakeweb.ARTICLE_TEXT[0] in result
    page = Source.objects.get(run_id=ctx.run_id)
    assert page.final_url == f"{allowed.url}/article"


def test_huge_page_is_cut_at_the_byte_cap(ctx, allowed, settings):
    settings.READ_PAGE_MAX_BYTES = 1024 * 1024

    result = read(ctx, f"{allowed.url}/huge")

    assert "Note: the page was cut at 1 MB (READ_PAGE_MAX_BYTES)" in result
    limit = settings.RESEARCH_TOOL_RESULT_MAX_CHARS
    assert f"this shows the first {limit:,} of " in result
    assert len(result) < limit + 500
    page = Source.objects.get(run_id=ctx.run_id)
    assert page.sha256 == hashlib.sha256(fakeweb.huge_body(1024 * 1024)).hexdigest()
    assert limit < len(page.text) <= 1024 * 1024


def test_a_page_with_one_broken_character_keeps_the_rest_of_its_accents(ctx, allowed):
    # A page cut at the byte limit can end inside a character, as this one does.
    body = "<html><head><title>Café</title></head><body><p>Le café crème.</p></body></html>"
    allowed.add_page("/cafe", body.encode() + "é".encode()[:1], content_type="text/html")

    result = read(ctx, f"{allowed.url}/cafe")

    assert "Le café crème." in result
    assert "Ã©" not in result


def test_a_charset_declared_only_in_the_page_is_read(ctx, allowed):
    body = (
        '<html><head><meta charset="iso-8859-1"><title>Caf\xe9</title></head>'
        "<body><article><p>Un caf\xe9 cr\xe8me, s'il vous pla\xeet, et merci.</p>"
        "</article></body></html>"
    )
    allowed.add_page("/latin", body.encode("latin-1"), content_type="text/html")

    assert "Un café crème, s'il vous plaît" in read(ctx, f"{allowed.url}/latin")


def test_unreadable_type_is_refused(ctx, allowed):
    allowed.add_page("/otter.png", b"\x89PNG\r\n\x1a\n", content_type="image/png")

    assert "is image/png, which read_page cannot read" in refusal(ctx, f"{allowed.url}/otter.png")
    assert not Source.objects.exists()


def test_error_status_is_reported(ctx, allowed):
    assert refusal(ctx, f"{allowed.url}/status/404").endswith("answered 404.")


def test_redirect_loop_gives_up_after_five_hops(ctx, allowed):
    assert "redirected more than 5 times" in refusal(ctx, f"{allowed.url}/redirect-loop")
    assert allowed.requests.count("GET /redirect-loop") == 6


def test_slow_page_times_out(ctx, allowed, settings):
    settings.READ_PAGE_TIMEOUT_SECONDS = 0.3

    assert "did not answer within 0.3 s" in refusal(ctx, f"{allowed.url}/slow?seconds=2")


# --- read_page: the address guard ----------------------------------------------------------


def test_loopback_is_refused_unless_allowed(ctx, web, connections):
    message = refusal(ctx, f"{web.url}/article")

    assert message == (
        f"read_page: refused {web.url}/article: 127.0.0.1 is a loopback address. "
        "read_page only reads public web pages."
    )
    assert web.requests == []
    assert connections == []


def test_hostname_that_resolves_to_loopback_is_refused(ctx, web, connections):
    message = refusal(ctx, f"http://localhost:{web.port}/")

    assert "localhost resolves to" in message
    assert "a loopback address" in message
    assert web.requests == []
    assert connections == []


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://169.254.169.254/latest/meta-data", "cloud metadata"),
        ("http://[fd00:ec2::254]/latest/meta-data", "cloud metadata"),
        ("http://10.0.0.1/", "private"),
        ("http://[::ffff:10.0.0.1]/", "private"),
        ("http://0.0.0.0/", "unspecified"),
    ],
)
def test_private_and_metadata_addresses_are_refused_before_connecting(ctx, connections, url, kind):
    message = refusal(ctx, url)

    assert message.startswith(f"read_page: refused {url}: ")
    assert f"a {kind} address. read_page only reads public web pages." in message
    assert connections == []
    assert not Source.objects.exists()


def test_redirect_to_a_private_address_is_refused(ctx, allowed, connections):
    message = refusal(ctx, f"{allowed.url}/redirect-private")

    assert message == (
        f"read_page: refused the redirect from {allowed.url}/redirect-private to "
        "http://10.0.0.1/: 10.0.0.1 is a private address. read_page only reads public web pages."
    )
    assert "10.0.0.1" not in connections
    assert set(connections) == {"127.0.0.1"}
    assert not Source.objects.exists()


def test_pages_of_one_host_share_one_kept_alive_connection(ctx, allowed, connections):
    read(ctx, f"{allowed.url}/article")
    read(ctx, f"{allowed.url}/notes.txt")
    read(ctx, f"{allowed.url}/doc.pdf")

    assert connections == ["127.0.0.1"]
    assert allowed.requests == ["GET /article", "GET /notes.txt", "GET /doc.pdf"]


def test_a_kept_connection_is_not_reused_once_its_host_is_no_longer_allowed(ctx, allowed, settings):
    read(ctx, f"{allowed.url}/article")
    settings.READ_PAGE_ALLOWED_HOSTS = []

    assert "127.0.0.1 is a loopback address" in refusal(ctx, f"{allowed.url}/notes.txt")
    assert allowed.requests == ["GET /article"]


@pytest.mark.parametrize(
    ("url", "what"),
    [
        ("file:///etc/passwd", "not a file:// URL"),
        ("ftp://example.com/file.txt", "not a ftp:// URL"),
        ("example.com/page", "not a URL without http:// or https://"),
    ],
)
def test_other_schemes_are_refused(ctx, connections, url, what):
    message = refusal(ctx, url)

    assert message == f"read_page: only http and https URLs can be read, {what}: {url}"
    assert connections == []


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.2",
        "::1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "100.64.0.1",
        "224.0.0.1",
        "::ffff:192.168.0.1",
        "2002:a00:1::1",
        "fe80::1",
        "fc00::1",
        "240.0.0.1",
    ],
)
def test_non_public_addresses_are_recognised(address):
    assert not_public(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700::1111", "8.8.8.8"])
def test_public_addresses_pass(address):
    assert not_public(ipaddress.ip_address(address)) is None


def test_a_misspelt_search_provider_stops_startup_with_its_name(settings):
    """SEARCH_PROVIDER=searx started the server, whose start form offered to "search the web"
    and whose every web_search then failed. Now nothing starts, and the error says why."""
    checked = manage_check(settings, SEARCH_PROVIDER="searx")
    assert checked.returncode != 0
    assert (
        "SEARCH_PROVIDER is 'searx' on this server, which is not one of searxng, tavily, brave, "
        "ddgs, openai (empty: no web search)." in checked.stderr
    )
    known = manage_check(settings, SEARCH_PROVIDER="searxng", SEARXNG_URL="http://127.0.0.1:9")
    assert known.returncode == 0, known.stderr
