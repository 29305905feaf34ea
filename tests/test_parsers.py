"""Every parser Canopy writes itself reads a stranger's input in time linear in its size
(issue 22): one request, one page, one upload or one model answer must never hold the
process. Each shape below once took time quadratic in its size; at these sizes that was
minutes to hours, so the bound of each test is a hundred times what the linear code needs and
still a thousand times less than the old code took."""

import time

import httpx
import pytest
from rest_framework.authtoken.models import Token

from agents.loop.review import parse_verdict
from agents.tools.web import _cited_line, clean_text
from research.fulltext import chunk_text, normalise_text
from research.models import Run
from research.parsers import json_depth
from research.services.citations import cited_urls
from research.text import html_text, html_title, visible_text

MB = 1_000_000
BOUND_SECONDS = 5

HOSTILE_SHAPES = {
    # The API's JSON depth check: a string of escaped quotes that never closes.
    "json depth: an unclosed string of escaped quotes": (
        json_depth,
        '{"topic": "' + '\\"' * MB,
    ),
    # Pages read by an agent and HTML files uploaded by an analyst.
    "page text: scripts that never close": (visible_text, "<script>" * 300_000),
    "page text: tags that never close": (visible_text, "<" * MB),
    "page text: line breaks that never close": (visible_text, "<br" * 300_000),
    "page title: titles that never close": (html_title, "<title>" * 300_000),
    "page extraction: scripts that never close": (
        lambda text: html_text(text.encode()),
        "<html><body>" + "<script>" * 300_000,
    ),
    # Text files uploaded to a knowledge base.
    "uploaded text: a long run of blanks": (normalise_text, " " * MB + "x"),
    "uploaded text: chunked": (lambda text: list(chunk_text(text)), " \n" * MB),
    # A model's report and its verifier's answer.
    "report citations: brackets that never close": (cited_urls, "[" * MB),
    "verifier answer: one line of hashes": (parse_verdict, "##" * MB),
    "verifier answer: blank lines under its heading": (
        parse_verdict,
        "## Unsupported claims\n" + " \n" * MB,
    ),
    # Search results from a provider.
    "search snippet: tags that never close": (clean_text, "<" * MB),
    "search answer: links that never close": (lambda text: _cited_line(text, len(text)), "[(" * MB),
}


@pytest.mark.parametrize("shape", HOSTILE_SHAPES)
def test_a_hostile_shape_is_read_in_time_linear_in_its_size(shape):
    parse, text = HOSTILE_SHAPES[shape]
    started = time.perf_counter()
    parse(text)
    assert time.perf_counter() - started < BOUND_SECONDS


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_a_body_of_escaped_quotes_is_refused_at_once_and_the_server_answers_meanwhile(
    daphne_server, alice
):
    """The reproduction of the issue on a real server: 64 KB held the process for 15 s."""
    token = Token.objects.create(user=alice).key
    body = '{"topic": "' + '\\"' * 1_200_000  # just under the 2.5 MB body limit
    with httpx.Client(
        base_url=daphne_server.url, headers={"Authorization": f"Token {token}"}, timeout=30
    ) as client:
        started = time.perf_counter()
        refused = client.post(
            "/v1/gb/research", content=body, headers={"Content-Type": "application/json"}
        )
        assert time.perf_counter() - started < BOUND_SECONDS
        assert refused.status_code == 400
        assert "Unterminated string" in refused.json()["detail"]
        assert client.get("/healthz").status_code == 200
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_body_over_the_limit_is_a_json_413_that_says_the_limit(api, settings):
    body = '{"topic": "' + "a" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10) + '"}'

    response = api.post("/v1/gb/research", body, content_type="application/json")

    assert response.status_code == 413
    assert response.json() == {
        "detail": f"The request body is larger than the "
        f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes this API takes."
    }
    assert not Run.objects.exists()


def test_a_pages_title_is_the_one_trafilaturas_metadata_gives_cleaned_as_it_cleans_it():
    """The title comes from the page's meta tags before its <title>, with the site's name
    left out of a <title>, entities unescaped and at most 10,000 characters, as trafilatura's
    metadata gave it before Canopy stopped asking it for the rest (the page's date)."""
    body = b"<body><article><p>" + b"The otters came back to the valley. " * 20 + b"</p></article>"

    def page(head: bytes) -> bytes:
        return b"<html><head>" + head + b"</head>" + body + b"</body></html>"

    meta = b'<title>Ignored</title><meta property="og:title" content="Otters &amp;amp; rivers">'
    assert html_text(page(meta))[0] == "Otters & rivers"
    assert html_text(page(b"<title>Otters return | Valley Gazette</title>"))[0] == "Otters return"
    title, text = html_text(page(b'<meta property="og:title" content="' + b"x" * 20_000 + b'">'))
    assert title == "x" * 9_999 + "…"
    assert text.startswith("The otters came back to the valley.")
