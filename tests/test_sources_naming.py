"""How a knowledge-base passage is named and opened, on the page and in every export: a link
in a list of sources quotes nothing, an export names a passage by its document's heading as
the page does (and the PDF opens its page), a Markdown heading's marks are no part of a
title, and a passage's page shows what comes just before and after it.

The pages are proven in Chromium by tests/test_browser_sources_naming.py."""

import importlib
import io
import re
from urllib.parse import parse_qs, urlsplit

import docx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from pypdf import PdfReader

from agents.runtime.context import AgentContext, CancelToken
from agents.tools.knowledge import QUERY
from frontend.exports import print_html
from frontend.passages import passage_href
from frontend.rendering import render_report_page
from research import services
from research.fulltext import document_heading, search_chunks
from research.models import Dataset, Document, Source
from research.services.citations import citations_record
from research.services.datasets import document_add

pytestmark = pytest.mark.django_db

SPECIAL = "Special method names\n********************\n\n" + " ".join(
    f"Method {n} is looked up on the type, not on the instance." for n in range(60)
)


def hrefs(html: str) -> list[str]:
    return re.findall(r'<a href="([^"]+)"', html)


def quote_of(href: str) -> str:
    return parse_qs(urlsplit(href).query).get("q", [""])[0]


def test_a_link_in_a_list_of_sources_quotes_nothing_and_a_finding_keeps_its_quote():
    """The demo's report, as the reviewer walked it: the last finding has no link, then the
    report's own Sources list. Its links quoted the last lines read before them, which no
    passage holds, and each passage page said so."""
    kb = "kb://dataset/1/document/63#45"
    report = (
        "## Findings\n\n"
        f"> Dictionaries preserve insertion order.\n>\n> — [typesmapping]({kb})\n\n"
        "### spring (done)\n\n"
        "> No passage of the knowledge base matches 'Spring and neap tides'.\n\n"
        f"## Sources\n\n- [typesmapping, passage 46]({kb})\n"
        f"- Dictionaries keep their insertion order ([typesmapping]({kb})).\n"
    )

    html = render_report_page(report, passage_link=passage_href).html

    finding, listed, claimed = hrefs(html)
    assert quote_of(finding) == "Dictionaries preserve insertion order"
    assert listed == "/kb/1/documents/63/passages/45/"  # no quote: nothing to highlight
    assert quote_of(claimed) == "Dictionaries keep their insertion order"  # its own words


def test_a_markdown_heading_is_a_documents_title_without_its_marks():
    assert document_heading("tidal-bores", "# Tidal bores\n\nA bore is a wave.") == "Tidal bores"
    assert document_heading("notes", "## Where they occur ##\n\nIn estuaries.") == (
        "Where they occur"
    )
    assert document_heading("specialnames", SPECIAL[:300]) == "Special method names"
    # A title of words stays; a first line that is a sentence is no heading.
    assert document_heading("My notes", "# Tidal bores") == "My notes"
    assert document_heading("kestrels", "Kestrels hover over verges.\n\nThey eat voles.") == (
        "kestrels"
    )


def test_a_one_word_title_its_uploader_gave_is_kept_on_every_page(client, alice):
    """A title "Keepers", given at upload, read "Lighthouse keeping" (its text's heading):
    a one-word title looked like a file's name. The title a person gives is now stored as
    given; a file's name still gives way to its text's heading."""
    dataset = Dataset.objects.create(owner=alice, name="Coasts")
    text = b"# Lighthouse keeping\n\nKeepers trimmed the wicks every four hours."
    given = document_add(dataset=dataset, title="Keepers", data=text, filename="a.md")
    named = document_add(dataset=dataset, title="", data=text + b" Twice.", filename="b.md")
    assert (given.title_given, named.title_given) == (True, False)
    client.force_login(alice)
    listed = client.get(f"/kb/{dataset.pk}/").content.decode()
    assert ">Keepers<" in listed and ">Lighthouse keeping<" in listed
    passage = client.get(f"/kb/{dataset.pk}/documents/{given.pk}/passages/0/").content.decode()
    assert "<h1>Keepers</h1>" in passage
    hits = search_chunks(dataset_id=dataset.pk, question="wicks hours")
    assert sorted(hit.document_title for hit in hits) == ["Keepers", "Lighthouse keeping"]


def test_titles_stored_before_the_flag_are_marked_given_unless_a_loader_made_them():
    migration = importlib.import_module("research.migrations.0016_document_title_given")
    assert migration._given("Keepers", "keepers.md")  # an upload with its own title
    assert not migration._given("keepers", "keepers.md")  # its file's name
    assert not migration._given("guides/tides", "guides/tides.md")  # load_dataset's path
    assert not migration._given("compound", "pydoc_data.topics['compound'] (Python 3.11.7)")
    assert migration._given("Keepers", "") and not migration._given("untitled", "")  # no source
    assert migration._given("Keepers", "/") and migration._given("Keepers", ".")


@pytest.fixture
def bores(alice) -> Dataset:
    dataset = Dataset.objects.create(owner=alice, name="Estuaries")
    sentences = " ".join(f"Bore {n} runs up river number {n} at dawn." for n in range(90))
    document_add(
        dataset=dataset,
        title="",
        data=f"# Tidal bores\n\n{sentences}".encode(),
        filename="tidal-bores.md",
    )
    return dataset


def test_the_apis_document_is_named_as_every_page_names_it(api, alice, bores):
    """The document resource said "tidal-bores", its file's name, where its hits, its
    pages and the reports say "Tidal bores"; a title given at upload stays as given."""
    listed = api.get(reverse("api:dataset-documents", args=[bores.pk])).json()["results"]
    assert [document["title"] for document in listed] == ["Tidal bores"]
    one = api.get(reverse("api:dataset-document", args=[bores.pk, listed[0]["id"]])).json()
    assert (one["title"], one["source"]) == ("Tidal bores", "tidal-bores.md")
    upload = SimpleUploadedFile("k.md", b"# Lighthouse keeping\n\nWicks.", "text/markdown")
    uploaded = api.post(
        reverse("api:dataset-documents", args=[bores.pk]),
        {"file": upload, "title": "Keepers"},
        format="multipart",
    )
    assert uploaded.status_code == 201 and uploaded.json()["title"] == "Keepers"
    upload = SimpleUploadedFile("l.md", b"# Lighthouse keeping\n\nLamps.", "text/markdown")
    plain = api.post(
        reverse("api:dataset-documents", args=[bores.pk]), {"file": upload}, format="multipart"
    )
    assert plain.json()["title"] == "Lighthouse keeping"


def test_a_search_names_a_document_by_its_heading_for_the_api_and_the_agents(api, alice, bores):
    """The query API and the agents' query tool said "tidal-bores", the file's name, where
    every page says "Tidal bores": an agent then wrote "[tidal-bores](kb://...)"."""
    found = api.get(reverse("api:dataset-query", args=[bores.pk]), {"q": "bore river dawn"})
    assert {hit["document_title"] for hit in found.json()} == {"Tidal bores"}
    root = services.run_start(owner=alice, topic="Bores", dataset_id=bores.pk)
    answer = QUERY.handler(AgentContext.load(root.pk, CancelToken(root.pk)), {"question": "bore"})
    assert "[1] Tidal bores (kb://" in answer and "tidal-bores" not in answer


def test_the_title_and_the_list_show_the_heading_without_its_marks(client, alice, bores):
    document = bores.documents.get()
    client.force_login(alice)

    page = client.get(reverse("passage", args=[bores.pk, document.pk, 0])).content.decode()
    listing = client.get(reverse("knowledge-documents", args=[bores.pk])).content.decode()

    assert "<h1>Tidal bores</h1>" in page
    assert "<title>Tidal bores: passage 1" in page
    # The passage's own heading reads as words, not as Markdown's "# Tidal bores".
    shown = re.search(r'id="passage">([^<]*)', page)[1]
    assert shown.startswith("Tidal bores\n\nBore 0 runs up river number 0 at dawn."), shown[:40]
    first = reverse("passage", args=[bores.pk, document.pk, 0])
    assert f'<a href="{first}">Tidal bores</a>' in listing
    assert '<span class="muted document-source">tidal-bores.md</span>' in listing
    assert "Delete Tidal bores and its" in listing


def test_a_passages_page_shows_what_comes_just_before_and_after_it(client, alice, bores):
    document = bores.documents.get()
    assert document.chunks.count() >= 3
    middle = document.chunks.get(position=1).text
    client.force_login(alice)

    page = client.get(reverse("passage", args=[bores.pk, document.pk, 1])).content.decode()

    before = re.search(r'id="passage-before">([^<]*)</p>', page)[1].removeprefix("…")
    after = re.search(r'id="passage-after">([^<]*)</p>', page)[1].removesuffix("…")
    # Read in order, the three are the document's text: no words twice, none left out.
    words = " ".join(f"{before} {middle} {after}".split())
    assert words in " ".join(document.text.split())
    assert before.rstrip().endswith("at dawn.") and after.startswith("Bore ")


def special_document(alice) -> tuple[Dataset, Document]:
    """alice's "Python reference" with one document stored under a slug ("specialnames"),
    as the starter dataset's are, whose heading is "Special method names"."""
    dataset = Dataset.objects.create(owner=alice, name="Python reference")
    document = document_add(
        dataset=dataset,
        title="specialnames",
        data=SPECIAL.encode(),
        filename="specialnames.txt",
        title_given=False,
    )
    return dataset, document


def finished(alice, dataset, report: str, web: tuple[str, ...] = ()):
    """A finished research of alice's on `dataset` whose agents read every passage and the
    `web` pages."""
    root = services.run_start(owner=alice, topic="What are special methods?", dataset_id=dataset.pk)
    for chunk in dataset.chunks.all():
        url = f"kb://dataset/{dataset.pk}/document/{chunk.document_id}#{chunk.position}"
        Source.objects.create(run=root, root=root, kind="chunk", url=url, text=chunk.text)
    for url in web:
        Source.objects.create(run=root, root=root, kind="page", url=url, text="A page.")
    citations_record(run_id=root.pk, report=report)
    services.run_finish(run_id=root.pk, report=report)
    root.refresh_from_db()
    return root


def test_every_export_names_a_passage_as_the_page_does_and_the_pdf_opens_its_page(api, alice):
    dataset, document = special_document(alice)
    kb = f"kb://dataset/{dataset.pk}/document/{document.pk}#"
    report = (
        "# Special methods\n\n## Findings\n\n"
        f"> Method 3 is looked up on the type.\n>\n> — [specialnames]({kb}0)\n\n"
        f"> Method 40 is looked up on the type.\n>\n> — [specialnames]({kb}1)\n\n"
        f"## Sources\n\n- [specialnames, passage 1]({kb}0)\n- [specialnames, passage 2]({kb}1)\n"
    )
    root = finished(alice, dataset, report)
    export = f"/v1/gb/research/{root.pk}/export?format="
    site = "http://testserver"

    markdown = api.get(export + "md").content.decode()
    pdf = api.get(export + "pdf").content
    word = "\n".join(
        p.text for p in docx.Document(io.BytesIO(api.get(export + "docx").content)).paragraphs
    )
    printed = print_html(root, site=site)

    passages = f"{site}/kb/{dataset.pk}/documents/{document.pk}/passages/"
    for text in (markdown, word, printed):
        assert "specialnames" not in text
    # Two passages of one document cited: each named by its passage, in the report too.
    quoted = f"> — [Special method names, passage 1]({passages}0/?q=Method+3+is+looked"
    assert quoted in markdown
    assert f"- [Special method names, passage 2]({passages}1/)" in markdown
    assert f"1. [Special method names, passage 1]({passages}0/): verified, seen by the root" in (
        markdown
    )
    assert "cost $0.00," in markdown and "cost $0.00," in word  # as the page writes money
    assert "— Special method names, passage 1 ✓" in word
    assert "1. Special method names, passage 1: verified, seen by the root agent" in word
    assert '>Special method names, passage 1<span class="cite-mark"' in printed
    assert "verified, seen by the root agent" in printed and "research agent" not in printed
    # No reader opens kb://: each link opens the passage's page in Canopy.
    assert 'href="kb://' not in printed and "kb://" not in markdown
    links = [
        annotation.get_object()["/A"].get("/URI", "")
        for page in PdfReader(io.BytesIO(pdf)).pages
        for annotation in page.get("/Annots") or []
    ]
    assert len(links) == 6, links  # four in the report, two in its sources checked
    assert all(link.startswith(passages) for link in links), links
    text = " ".join("\n".join(p.extract_text() for p in PdfReader(io.BytesIO(pdf)).pages).split())
    assert "Special method names, passage 2" in text and "specialnames" not in text


def test_a_heading_with_a_control_character_or_brackets_still_exports(api, alice):
    """Headings come from what the analyst uploaded: a control character made the Word
    export a 500 (Word refuses it), and a "]" or "\\" in a heading ended its links early in
    the Markdown, PDF and Word exports, which then showed "[...](kb://...)" as text."""
    dataset = Dataset.objects.create(owner=alice, name="Odd headings")
    bell = document_add(
        dataset=dataset,
        title="notes",
        data=b"# Tidal\x07 bores\n\nA bore is a wave.",
        filename="n.md",
        title_given=False,  # named by its heading, as a loader's file is
    )
    bracket = document_add(
        dataset=dataset,
        title="more",
        data=b"# Bores] and tides \\\n\nThe tide comes in.",
        filename="m.md",
        title_given=False,
    )
    bell_kb = f"kb://dataset/{dataset.pk}/document/{bell.pk}#0"
    bracket_kb = f"kb://dataset/{dataset.pk}/document/{bracket.pk}#0"
    report = f"# Bores\n\nA bore is a wave ([notes]({bell_kb})); so is this ([more]({bracket_kb}))."
    root = finished(alice, dataset, report)
    export = f"/v1/gb/research/{root.pk}/export?format="

    word = api.get(export + "docx")
    assert word.status_code == 200
    text = "\n".join(p.text for p in docx.Document(io.BytesIO(word.content)).paragraphs)
    assert "Tidal bores" in text and "Bores] and tides \\" in text
    markdown = api.get(export + "md").content.decode()
    bracket_page = f"http://testserver/kb/{dataset.pk}/documents/{bracket.pk}/passages/0/"
    bell_page = f"http://testserver/kb/{dataset.pk}/documents/{bell.pk}/passages/0/"
    assert f"[Bores\\] and tides \\\\]({bracket_page}?q=" in markdown
    assert f"1. [Tidal bores]({bell_page})" in markdown
    html = render_report_page(markdown, [], []).html
    assert "](kb://" not in html  # every link still a link


def test_a_link_written_in_code_is_exported_as_written(api, alice):
    """A report about Markdown may quote a kb:// link in backticks or a fence: the exports
    named it by its heading there too, which changed the code the report quoted."""
    dataset, document = special_document(alice)
    kb = f"kb://dataset/{dataset.pk}/document/{document.pk}#0"
    report = (
        f"# Links\n\nWrite `[specialnames]({kb})` to cite it, as in\n\n"
        f"```\n[specialnames]({kb})\n```\n\nwhich reads [specialnames]({kb})."
    )
    root = finished(alice, dataset, report)

    markdown = api.get(f"/v1/gb/research/{root.pk}/export?format=md").content.decode()

    assert f"Write `[specialnames]({kb})` to cite it" in markdown
    assert f"```\n[specialnames]({kb})\n```" in markdown
    page = f"http://testserver/kb/{dataset.pk}/documents/{document.pk}/passages/0/"
    assert f"which reads [Special method names]({page}?q=" in markdown
