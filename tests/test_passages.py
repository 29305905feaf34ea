"""The page of a knowledge-base passage a report cites: the owner's only, quote highlighted."""

import pytest
from django.urls import reverse

from frontend.passages import passage_href, passage_href_pattern
from frontend.rendering import render_report_page
from frontend.templatetags.canopy import linked
from research.fulltext import parse_chunk_url, source_names
from research.models import Dataset
from research.services.datasets import document_add

pytestmark = pytest.mark.django_db

TEXT = "Dippers and their dives\n\nDippers walk along the bottom of fast streams."


@pytest.fixture
def passage_url(alice) -> str:
    dataset = Dataset.objects.create(owner=alice, name="Birds")
    document = document_add(dataset=dataset, title="", data=TEXT.encode(), filename="dippers.txt")
    return passage_href(
        f"kb://dataset/{dataset.pk}/document/{document.pk}#0", "walk along the bottom."
    )


def test_the_owner_sees_the_passage_with_the_quote_highlighted(client, alice, passage_url):
    client.force_login(alice)
    response = client.get(passage_url)
    assert response.status_code == 200
    page = response.content.decode()
    assert "<h1>Dippers and their dives</h1>" in page
    assert "<mark class='quoted'>walk along the bottom</mark>" in page


def test_another_user_gets_a_404(client, bob, passage_url):
    client.force_login(bob)
    assert client.get(passage_url).status_code == 404


def test_a_missing_chunk_is_a_404(client, alice, passage_url):
    client.force_login(alice)
    assert client.get(passage_url.replace("/passages/0/", "/passages/9/")).status_code == 404


def test_only_kb_addresses_become_passage_links():
    assert parse_chunk_url("https://example.org/x") is None
    assert passage_href("kb://dataset/1/document/2#3") == reverse("passage", args=[1, 2, 3])


def test_sources_sharing_a_title_are_named_by_their_passage():
    sources = [
        ("kb://dataset/1/document/2#0", "Tidal bores"),
        ("https://example.org/spring", "Spring tides"),
        ("kb://dataset/1/document/2#4", "Tidal bores"),
        ("kb://dataset/1/document/3#0", "Neap tides"),
        ("https://example.org/a", "Home"),
        ("https://example.org/b", "Home"),
    ]
    assert source_names(sources) == [
        "Tidal bores, passage 1",
        "Spring tides",
        "Tidal bores, passage 5",
        "Neap tides",
        "Home",  # pages have no passages: their addresses tell them apart
        "Home",
    ]
    # Two documents of one title, cited at the same passage: the address tells them apart.
    twins = [("kb://dataset/1/document/2#0", "Intro"), ("kb://dataset/1/document/5#0", "Intro")]
    assert source_names(twins) == [
        "Intro, passage 1 (kb://dataset/1/document/2#0)",
        "Intro, passage 1 (kb://dataset/1/document/5#0)",
    ]
    # Digits of other scripts are no passage's number.
    assert parse_chunk_url("kb://dataset/\u0661/document/2#3") is None


def test_a_messages_addresses_become_links_and_the_rest_stays_text():
    """The panel's messages (frontend/templatetags/canopy.py `linked`; the page's script links
    the feed's as static/page/format.js appendLinked does). A passage reads as a report names
    it, its address on hover; without its document's title, by its numbers."""
    link = '<a href="{}"{} target="_blank" rel="noopener noreferrer nofollow">{}</a>'
    web, kb = "https://example.org/otters_(river)", "kb://dataset/1/document/2#3"
    text = (
        f"See {web}. Or ({kb}), kb://dataset/x, https:// and <b>bold</b> & more "
        "(https://[citation needed])"
    )
    passage = "/kb/1/documents/2/passages/3/"
    hint = f' title="{kb}"'

    assert linked(text) == (
        f"See {link.format(web, '', web)}. "
        f"Or ({link.format(passage, hint, 'passage 4 of document 2')}), kb://dataset/x, "
        "https:// and &lt;b&gt;bold&lt;/b&gt; &amp; more (https://[citation needed])"
    )
    titled = linked(f"Read {kb}.", {kb: "Tidal bores"})
    assert titled == f"Read {link.format(passage, hint, 'Tidal bores, passage 4')}."
    assert passage_href_pattern() == "/kb/{dataset}/documents/{document}/passages/{position}/"


def test_a_report_names_a_passage_by_its_documents_title_and_keeps_its_number():
    """The demo cites a passage under its document's slug ("types"), which the page shows as
    the document's title; a source it lists by passage ("types, passage 29") keeps the
    number. A document the report cites at two passages names its passage everywhere: two
    quotes of it both read "— The standard type hierarchy" (a tester's walk)."""
    kb, other = "kb://dataset/1/document/7#28", "kb://dataset/1/document/7#4"
    report = (
        f"> Objects have types.\n>\n> — [types]({kb})\n\n- [types, passage 29]({kb})\n"
        f"- [types, passage 2]({other})\n"  # a number the address does not hold
    )
    titles = {kb: "The standard type hierarchy", other: "The standard type hierarchy"}

    html = render_report_page(report, passage_link=passage_href, titles=titles).html

    assert ">The standard type hierarchy, passage 29</a>" in html
    assert html.count(">The standard type hierarchy, passage 29</a>") == 2  # quote and list
    assert ">The standard type hierarchy, passage 5</a>" in html  # its address's, #4
    assert ">The standard type hierarchy</a>" not in html
    assert "types, passage" not in html

    # Cited at one passage, the document's title alone says which.
    alone = render_report_page(report.split("\n\n- ")[0], passage_link=passage_href, titles=titles)
    assert ">The standard type hierarchy</a>" in alone.html


def test_a_source_named_with_its_address_reads_as_its_passage_without_the_address():
    """Two documents of one title are listed by the demo with their addresses ("tea, passage
    1 (kb://…)"): the page showed that text as it was, the address and the file's name."""
    first, second = "kb://dataset/2/document/80#0", "kb://dataset/2/document/82#0"
    report = f"- [tea, passage 1 ({first})]({first})\n- [tea, passage 1 ({second})]({second})\n"
    titles = {first: "Tea Notes", second: "Tea Notes"}

    html = render_report_page(report, passage_link=passage_href, titles=titles).html

    assert html.count(">Tea Notes, passage 1</a>") == 2
    assert "kb://" not in html and "tea," not in html
