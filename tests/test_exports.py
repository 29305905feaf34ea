"""Exports: the same code answers the API, the run page's buttons and the CLI; the PDF is
printed by the real Chromium and keeps the citation marks and the sources list."""

import io

import docx
import pytest
import redis
from django.core.management import CommandError, call_command
from docx.opc.constants import RELATIONSHIP_TYPE
from docx.oxml.ns import qn
from pypdf import PdfReader

from frontend.exports import DOCX, pdf_slots, print_html
from research import services
from research.models import Source
from research.services.citations import citations_record
from tests.test_cli import finished_tree  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db


def export(api, run_id: int, format: str | None):
    query = f"?format={format}" if format else ""
    return api.get(f"/v1/gb/research/{run_id}/export{query}")


def pdf_text(content: bytes) -> str:
    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(content)).pages)


def test_markdown_is_the_default_and_an_attachment(api, finished_tree):  # noqa: F811
    response = export(api, finished_tree.pk, None)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/markdown; charset=utf-8"
    assert response["Content-Disposition"] == (
        f'attachment; filename="canopy-research-{finished_tree.pk}.md"'
    )
    text = response.content.decode()
    assert text.startswith(finished_tree.report)
    assert "1. [PEP 343](https://peps.org/343): verified, seen by sub-agent history" in text
    assert "2. [https://made.up/x](https://made.up/x): not seen by any agent" in text


def test_json_holds_the_run_tree_citations_and_usage(api, finished_tree):  # noqa: F811
    response = export(api, finished_tree.pk, "json")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    document = response.json()
    assert document["run_id"] == finished_tree.pk
    assert len(document["runs"]) == 3
    assert [c["url"] for c in document["citations"]] == [
        "https://peps.org/343",
        "https://made.up/x",
    ]
    assert sum(call["input_tokens"] for call in document["usage"]) == 600


def test_the_pdf_keeps_the_report_its_citation_marks_and_the_sources(api, finished_tree):  # noqa: F811
    response = export(api, finished_tree.pk, "pdf")
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"] == "application/pdf"
    assert response.content.startswith(b"%PDF-")
    text = pdf_text(response.content)
    assert "Context managers" in text and "PEP 343" in text
    assert "Sources checked" in text
    assert "https://peps.org/343" in text and "verified, seen by sub-agent history" in text
    assert "https://made.up/x" in text and "not seen by any agent of this research" in text
    assert "✓" in text and "?" in text  # the marks beside the cited links


def test_the_cli_export_is_the_same_code(alice, finished_tree, tmp_path, api):  # noqa: F811
    out = io.StringIO()
    call_command("research", "export", str(finished_tree.pk), "--user", "alice", stdout=out)
    assert out.getvalue() == export(api, finished_tree.pk, "md").content.decode()
    target = tmp_path / "report.pdf"
    call_command(
        "research",
        "export",
        str(finished_tree.pk),
        "--format",
        "pdf",
        "-o",
        str(target),
        "--user",
        "alice",
        stdout=io.StringIO(),
    )
    assert "Sources checked" in pdf_text(target.read_bytes())


def test_a_bad_format_is_a_400_naming_it(api, finished_tree):  # noqa: F811
    response = export(api, finished_tree.pk, "odt")
    assert response.status_code == 400
    assert response.json() == {"format": ["format must be one of md, json, pdf, docx, not 'odt'."]}


def test_a_run_without_a_report_exports_as_json_only(api, run_factory):
    run = run_factory()
    for format in ("md", "pdf", "docx"):
        response = export(api, run.pk, format)
        assert response.status_code == 409
        assert response.json()["detail"] == (
            f"research {run.pk} has no report yet: it is queued; export it as json."
        )
    assert export(api, run.pk, "json").status_code == 200


def test_another_users_run_is_a_404_and_a_visitor_a_401(api_for, bob, finished_tree, client):  # noqa: F811
    assert export(api_for(bob), finished_tree.pk, "md").status_code == 404
    assert client.get(f"/v1/gb/research/{finished_tree.pk}/export").status_code == 401


def test_a_missing_chromium_is_a_503_that_says_so(api, finished_tree, settings):  # noqa: F811
    settings.PDF_CHROMIUM_PATH = "/nonexistent/chromium"
    response = export(api, finished_tree.pk, "pdf")
    assert response.status_code == 503
    assert "PDF export needs Chromium at /nonexistent/chromium" in response.json()["detail"]


def test_the_run_page_offers_the_exports(client, alice, finished_tree, run_factory):  # noqa: F811
    client.force_login(alice)
    page = client.get(f"/runs/{finished_tree.pk}/").content.decode()
    for format in ("md", "pdf", "docx", "json"):
        assert f'href="/v1/gb/research/{finished_tree.pk}/export?format={format}"' in page
    working = client.get(f"/runs/{run_factory().pk}/").content.decode()
    assert working.count("data-needs-report hidden") == 3  # no report yet: json only


def test_the_openapi_schema_describes_the_export(api):
    response = api.get("/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    export = response.json()["paths"]["/v1/gb/research/{run_id}/export"]["get"]
    assert set(export["responses"]["200"]["content"]) == {
        "text/markdown",
        "application/json",
        "application/pdf",
        DOCX,
    }
    (format,) = [p for p in export["parameters"] if p["name"] == "format"]
    assert sorted(format["schema"]["enum"]) == ["docx", "json", "md", "pdf"]


def test_a_user_holding_their_pdf_slot_is_refused_at_once_while_another_user_prints(
    api,
    api_for,
    bob,
    settings,
    finished_tree,  # noqa: F811
):
    """One user's flood of PDFs must not queue another user's behind it: past their share
    of the printers (EXPORT_PDF_PER_USER), a user is answered 429 at once."""
    settings.EXPORT_PDF_PER_USER = 1
    bobs = services.run_start(owner=bob, topic="Owls at night")
    services.run_finish(run_id=bobs.pk, report="# Owls\n\nThey hunt at night.")
    with pdf_slots.hold(finished_tree.owner_id):  # alice's first PDF is printing
        refused = export(api, finished_tree.pk, "pdf")
        assert refused.status_code == 429
        assert int(refused["Retry-After"]) > 0
        assert refused.json()["detail"] == (
            "you are already printing 1 PDF (at most 1 at once): try again when it is done."
        )
        printed = export(api_for(bob), bobs.pk, "pdf")
        assert printed.status_code == 200, printed.content[:300]
        assert "They hunt at night." in pdf_text(printed.content)
        assert export(api, finished_tree.pk, "md").status_code == 200  # only PDFs are shared
    again = export(api, finished_tree.pk, "pdf")  # her slot is back
    assert again.status_code == 200 and again.content.startswith(b"%PDF-")


# --- DOCX ----------------------------------------------------------------------------------

DOCX_REPORT = """# Tides and the moon

The **moon** pulls the oceans: see [NOAA on tides](https://oceanservice.noaa.gov/tides)
and https://made.up/tides.

## Why two tides a day

- the bulge under the moon
- the bulge on the far side

1. spring tides
2. neap tides
"""


def finished_research(owner_factory) -> "object":
    """A finished research whose report has headings, lists and two cited links, one of them
    read by an agent (verified) and one not (flagged)."""
    root = owner_factory(topic="Why are there two tides a day?")
    Source.objects.create(
        run=root, root=root, kind="page", url="https://oceanservice.noaa.gov/tides", title="NOAA"
    )
    citations_record(run_id=root.pk, report=DOCX_REPORT)
    services.run_finish(run_id=root.pk, report=DOCX_REPORT)
    root.refresh_from_db()
    return root


def opened(content: bytes) -> docx.document.Document:
    return docx.Document(io.BytesIO(content))


def hyperlink_targets(document) -> list[str]:
    """The targets of the document's w:hyperlink elements, in order, read from the part's
    relationships: each must be an external hyperlink relationship."""
    rels = document.part.rels
    ids = [link.get(qn("r:id")) for link in document.element.body.iter(qn("w:hyperlink"))]
    assert {rels[rid].reltype for rid in ids} == {RELATIONSHIP_TYPE.HYPERLINK}
    assert all(rels[rid].is_external for rid in ids)
    return [rels[rid].target_ref for rid in ids]


def test_the_docx_holds_headings_paragraphs_lists_links_and_the_sources(api, run_factory):
    research = finished_research(run_factory)

    response = export(api, research.pk, "docx")

    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"] == DOCX
    assert response["Content-Disposition"] == (
        f'attachment; filename="canopy-research-{research.pk}.docx"'
    )
    document = opened(response.content)
    paragraphs = [(p.style.name, p.text) for p in document.paragraphs]
    assert [text for style, text in paragraphs if style.startswith("Heading")] == [
        "Tides and the moon",
        "Why two tides a day",
        "Sources checked",
    ]
    assert paragraphs[0] == ("Heading 1", "Tides and the moon")
    assert ("Heading 2", "Sources checked") in paragraphs
    body = next(text for style, text in paragraphs if text.startswith("The moon"))
    assert body == ("The moon pulls the oceans: see NOAA on tides ✓ and https://made.up/tides ?.")
    bold = [run.text for p in document.paragraphs for run in p.runs if run.bold]
    assert bold == ["moon"]
    assert ("List Bullet", "the bulge under the moon") in paragraphs
    assert ("List", "2. neap tides") in paragraphs
    # Named as the run page's "Sources cited" names it: by the title of the page the agent read.
    assert ("List", "1. NOAA: verified, seen by the root agent") in paragraphs
    assert ("List", "2. https://made.up/tides: not seen by any agent of this research") in (
        paragraphs
    )
    assert hyperlink_targets(document) == [
        "https://oceanservice.noaa.gov/tides",
        "https://made.up/tides",
        "https://oceanservice.noaa.gov/tides",
        "https://made.up/tides",
    ]
    assert document.core_properties.title == "Why are there two tides a day?"


TABLE_REPORT = """# Tide tables

| Port | **Range** | Source |
| --- | --- | --- |
| Bristol | 12 *m* | [NOAA](https://oceanservice.noaa.gov/tides) |
| Brest | 7 m | https://made.up/brest |
"""


def test_a_table_in_the_docx_keeps_its_links_emphasis_and_marks(api, run_factory):
    """A table's cells held their Markdown as written: "[NOAA](https://...)" to read, no link
    to open, "**Range**" with its stars. Each cell is now written as a paragraph is."""
    root = run_factory(topic="Tide ranges by port")
    Source.objects.create(
        run=root, root=root, kind="page", url="https://oceanservice.noaa.gov/tides", title="NOAA"
    )
    citations_record(run_id=root.pk, report=TABLE_REPORT)
    services.run_finish(run_id=root.pk, report=TABLE_REPORT)

    document = opened(export(api, root.pk, "docx").content)

    (table,) = document.tables
    cells = [[cell.text for cell in row.cells] for row in table.rows]
    assert cells == [
        ["Port", "Range", "Source"],
        ["Bristol", "12 m", "NOAA ✓"],
        ["Brest", "7 m", "https://made.up/brest ?"],
    ]
    head = table.rows[0].cells
    assert all(run.bold for cell in head for run in cell.paragraphs[0].runs)
    body_runs = [
        run for row in table.rows[1:] for cell in row.cells for run in cell.paragraphs[0].runs
    ]
    assert [run.text for run in body_runs if run.italic] == ["m"]
    assert not any(run.bold for run in body_runs)
    links = [link for link in table._tbl.iter(qn("w:hyperlink"))]
    rels = document.part.rels
    assert [rels[link.get(qn("r:id"))].target_ref for link in links] == [
        "https://oceanservice.noaa.gov/tides",
        "https://made.up/brest",
    ]


def test_the_docx_export_follows_the_rules_of_every_export(
    api, api_for, bob, run_factory, settings, tmp_path
):
    research = finished_research(run_factory)
    counters = redis.Redis.from_url(settings.REDIS_URL)
    for key in counters.scan_iter(match="canopy:*throttle_*"):
        counters.delete(key)  # earlier tests' counts, for users with the same ids
    counters.close()
    settings.THROTTLE_RATES = {**settings.THROTTLE_RATES, "exports": "2/minute"}

    assert export(api_for(bob), research.pk, "docx").status_code == 404
    assert [export(api, research.pk, f).status_code for f in ("md", "docx")] == [200, 200]
    refused = export(api, research.pk, "docx")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0

    target = tmp_path / "report.docx"
    command = ["research", "export", str(research.pk), "--format", "docx", "--user", "alice"]
    call_command(*command, "-o", str(target), stdout=io.StringIO())
    assert opened(target.read_bytes()).paragraphs[0].text == "Tides and the moon"
    with pytest.raises(CommandError, match="a DOCX is written to a file: add --output"):
        call_command(*command, stdout=io.StringIO())


def test_a_knowledge_base_source_links_to_its_passage_in_exports_from_the_web(
    api, alice, run_factory, tmp_path
):
    from research.models import Dataset
    from research.services.datasets import document_add

    dataset = Dataset.objects.create(owner=alice, name="Birds")
    document = document_add(
        dataset=dataset, title="Dippers", data=b"Dippers walk under water.", filename="d.txt"
    )
    kb = f"kb://dataset/{dataset.pk}/document/{document.pk}#0"
    root = run_factory(dataset_id=dataset.pk)
    Source.objects.create(run=root, root=root, kind="chunk", url=kb, text="Dippers walk.")
    report = f"# Dippers\n\n> Dippers walk under water.\n>\n> — [Dippers]({kb})"
    citations_record(run_id=root.pk, report=report)
    services.run_finish(run_id=root.pk, report=report)
    passage = f"http://testserver/kb/{dataset.pk}/documents/{document.pk}/passages/0/"

    markdown = export(api, root.pk, "md").content.decode()
    pdf = export(api, root.pk, "pdf").content

    assert f"1. [Dippers]({passage}): verified" in markdown and "kb://" not in markdown
    assert "Dippers walk under water." in pdf_text(pdf)
    links = [
        annotation.get_object()["/A"].get("/URI", "")
        for page in PdfReader(io.BytesIO(pdf)).pages
        for annotation in page.get("/Annots") or []
    ]
    assert any(link.startswith(passage) for link in links), links
    out = tmp_path / "cli.md"
    call_command(
        "research", "export", str(root.pk), "--user", "alice", "--output", str(out)
    )  # fmt: skip
    assert kb in out.read_text() and "the passage" not in out.read_text()


def test_two_passages_of_one_document_are_named_apart_in_every_export(api, alice, run_factory):
    """Two passages of one document, cited under the document's title, were two identical
    entries in the sources an export lists: each is named by its passage, as on the page."""
    from research.models import Dataset
    from research.services.datasets import document_add

    dataset = Dataset.objects.create(owner=alice, name="Estuaries")
    text = ("Tidal bores form where a rising tide funnels into a river mouth. " * 20).encode()
    document = document_add(dataset=dataset, title="Tidal bores", data=text, filename="b.txt")
    assert document.chunks.count() >= 2
    kb = f"kb://dataset/{dataset.pk}/document/{document.pk}#"
    root = run_factory(dataset_id=dataset.pk)
    for position in (0, 1):
        Source.objects.create(run=root, root=root, kind="chunk", url=f"{kb}{position}", text="…")
    report = f"# Bores\n\nThey form at river mouths ([Tidal bores]({kb}0), [Tidal bores]({kb}1))."
    citations_record(run_id=root.pk, report=report)
    services.run_finish(run_id=root.pk, report=report)

    markdown = export(api, root.pk, "md").content.decode()
    word = [p.text for p in opened(export(api, root.pk, "docx").content).paragraphs]

    pages = f"http://testserver/kb/{dataset.pk}/documents/{document.pk}/passages/"
    assert f"1. [Tidal bores, passage 1]({pages}0/): verified" in markdown
    assert f"2. [Tidal bores, passage 2]({pages}1/): verified" in markdown
    # In the report too: one title for both would name two passages alike.
    assert f"mouths ([Tidal bores, passage 1]({pages}0/?q=" in markdown
    assert "1. Tidal bores, passage 1: verified, seen by the root agent" in word
    assert "2. Tidal bores, passage 2: verified, seen by the root agent" in word
    printed = print_html(root)  # the PDF's page, before Chromium prints it
    assert f'Tidal bores, passage 1: <a href="{kb}0">' in printed
    assert f'Tidal bores, passage 2: <a href="{kb}1">' in printed


def test_every_export_closes_with_one_agent_in_the_singular(api, run_factory):
    """The Markdown and Word footers said "1 agents" where the PDF said "1 agent"."""
    root = run_factory(topic="Why are there two tides a day?")
    services.run_finish(run_id=root.pk, report="# Tides\n\nTwo bulges.")

    markdown = export(api, root.pk, "md").content.decode()
    word = [p.text for p in opened(export(api, root.pk, "docx").content).paragraphs]

    assert f"*Canopy research {root.pk}, model " in markdown
    assert ", 1 agent, cost $0.00, " in markdown
    closing = [line for line in word if line.startswith(f"Canopy research {root.pk},")]
    assert len(closing) == 1 and ", 1 agent, cost " in closing[0]
    assert print_html(root).count(" 1 agent ") == 1
