"""The knowledge-base page in Debian's Chromium against a real daphne, at 1440x900 and on a
phone (390x844): create a knowledge base from the nav, upload several files at once (a PDF
that is read, and files refused in words: wrong type, empty, unreadable PDF, too large)
without losing the others, drop a file on the zone, delete a document with its
confirmation, then start a research on the knowledge base with the scripted model: its report
cites a passage of the uploaded PDF, and the citation opens the passage's page.

Screenshots go to SCREENSHOTS (default /tmp/shots-h-e) to be looked at.
"""

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from agents.llm.scripted import call, reply
from research import services
from research.models import Document, Run
from research.services.datasets import MAX_FILE_BYTES, dataset_create, document_add
from tests import browsing
from tests.browsing import SIZES, no_sideways_scroll, sized_page
from tests.conftest import wait_finished, wait_for
from tests.test_browser import browser, log_in, server  # noqa: F401  (fixtures)
from tests.test_knowledge import make_pdf

# ruff: noqa: F811  (pytest fixtures imported from tests.test_browser)
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = browsing.screenshots("/tmp/canopy-knowledge")
QUOTE = "The turbines reached an efficiency of 47 percent in March"
PDF = make_pdf("Quarterly report of the Zephyrine turbine programme.", f"{QUOTE}.")
NOTES = "# Maintenance\n\nThe blades were inspected every spring by rope access teams.\n"

# Every state each upload goes through, in order, by file name.
STATES_LOG = """
window.__uploads = {};
new MutationObserver((changes) => {
  for (const change of changes) {
    const row = change.target;
    if (!(row instanceof Element) || !row.matches("#uploads .upload")) continue;
    const name = row.querySelector(".upload-name").textContent;
    const seen = (window.__uploads[name] = window.__uploads[name] || []);
    if (seen[seen.length - 1] !== row.dataset.state) seen.push(row.dataset.state);
  }
}).observe(document, {subtree: true, attributes: true, attributeFilter: ["data-state"]});
"""


@pytest.fixture(params=list(SIZES))
def page(request, browser: Browser):
    yield from sized_page(browser, request.param, init_scripts=(STATES_LOG,))


def shot(page: Page, name: str, *, full_page: bool = False) -> None:
    browsing.shot(page, SCREENSHOTS, name, full_page=full_page)


def upload(page: Page, name: str):
    return page.locator("#uploads .upload").filter(
        has=page.locator(".upload-name", has_text=re.compile(f"^{re.escape(name)}$"))
    )


def drop(page: Page, files: list[tuple[str, str, int]]) -> None:
    """Drop files on the zone as a browser does: a drop event carrying them. Each is a name,
    a text, and a size to pad the text to (made in the page: 25 MB never crosses the wire)."""
    page.evaluate(
        """(files) => {
            const transfer = new DataTransfer();
            for (const [name, text, size] of files) {
                const bytes = new Uint8Array(Math.max(size, text.length)).fill(97);
                bytes.set(new TextEncoder().encode(text));
                transfer.items.add(new File([bytes], name));
            }
            const zone = document.getElementById("upload-zone");
            zone.dispatchEvent(new DragEvent("dragover", {dataTransfer: transfer, bubbles: true}));
            zone.dispatchEvent(new DragEvent("drop", {dataTransfer: transfer, bubbles: true}));
        }""",
        files,
    )


def test_an_uploaded_pdf_is_read_and_a_report_cites_its_passage(page, server, scripted_llm, alice):
    posted: list[str] = []
    page.on("request", lambda r: posted.append(r.url) if r.method == "POST" else None)
    log_in(page, server, "alice")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Knowledge bases").click()
    expect(page.get_by_role("heading", name="Knowledge bases")).to_be_visible()
    expect(page.get_by_text("No knowledge base yet.")).to_be_visible()
    page.get_by_role("button", name="Create knowledge base").click()
    expect(page.locator(".field-error")).to_have_text("Name must not be empty.")
    no_sideways_scroll(page, "create")
    shot(page, "0-create", full_page=True)
    page.get_by_label("Name").fill("Turbines")
    page.get_by_label("What it holds").fill("Reports of the Zephyrine programme")
    page.get_by_role("button", name="Create knowledge base").click()
    expect(page.get_by_role("heading", name="Turbines")).to_be_visible()
    expect(page.get_by_text("No documents yet.")).to_be_visible()
    no_sideways_scroll(page, "empty")
    shot(page, "1-empty", full_page=True)

    # Four files at once from the picker: one is read, three are refused, each in words.
    # (Once the page's script has bound the picker: a change before it is lost.)
    expect(page.locator("#upload-zone")).to_have_attribute("data-ready", "true")
    page.locator("#upload-files").set_input_files(
        [
            {"name": "turbines.pdf", "mimeType": "application/pdf", "buffer": PDF},
            {"name": "budget.xlsx", "mimeType": "application/vnd.ms-excel", "buffer": b"PK\x03"},
            {"name": "empty.txt", "mimeType": "text/plain", "buffer": b""},
            {"name": "scan.pdf", "mimeType": "application/pdf", "buffer": b"%PDF-1.4 torn"},
        ]
    )
    expect(upload(page, "turbines.pdf").locator(".upload-words")).to_have_text(
        "Added: 1 passage, ready to search."
    )
    expect(upload(page, "budget.xlsx").locator(".upload-words")).to_have_text(
        "budget.xlsx is not a supported type: upload text (.txt), Markdown (.md), "
        "HTML (.html) or PDF (.pdf)."
    )
    # A file of no bytes, in the words load_dataset says it with (DRF said "The submitted
    # file is empty.", without its name).
    expect(upload(page, "empty.txt").locator(".upload-words")).to_have_text(
        "empty.txt has no text to search."
    )
    expect(upload(page, "scan.pdf").locator(".upload-words")).to_have_text(
        re.compile(r"^scan\.pdf is not a readable PDF \(.+\)\.$")
    )
    expect(page.locator('#uploads .upload[data-state="refused"]')).to_have_count(3)
    # One at a time, each shown on its way: sent with its progress, read, then added or not.
    states = page.evaluate("window.__uploads")
    assert states["turbines.pdf"] == ["uploading", "reading", "added"], states
    assert states["scan.pdf"] == ["uploading", "reading", "refused"], states
    pdf = Document.objects.get(dataset__owner=alice, title="turbines")
    row = page.locator(f'tr[data-document-id="{pdf.pk}"]')
    expect(row).to_contain_text("PDF")
    expect(row.locator("[data-state]")).to_have_text("ready")
    expect(row.locator("[data-passages]")).to_contain_text("1")
    no_sideways_scroll(page, "uploaded")
    shot(page, "2-uploaded", full_page=True)

    # Files dropped on the zone join them. One over the limit is refused without being sent.
    drop(page, [("huge.txt", "", MAX_FILE_BYTES + 1), ("maintenance.md", NOTES, 0)])
    expect(upload(page, "huge.txt").locator(".upload-words")).to_have_text(
        f"huge.txt is {MAX_FILE_BYTES + 1:,} bytes; the limit is {MAX_FILE_BYTES:,}."
    )
    expect(upload(page, "maintenance.md").locator(".upload-words")).to_have_text(
        "Added: 1 passage, ready to search."
    )
    uploads = f"{server.url}/v1/gb/datasets/{pdf.dataset_id}/documents"
    assert posted.count(uploads) == 5, posted  # four from the picker, the notes dropped
    assert page.evaluate("window.__uploads")["huge.txt"] == ["refused"]
    expect(page.locator("tr[data-document-id]")).to_have_count(2)
    shot(page, "3-dropped", full_page=True)  # docs/knowledge-base.png at 1440x900
    notes = Document.objects.get(dataset__owner=alice, title="maintenance")
    notes_row = page.locator(f'tr[data-document-id="{notes.pk}"]')
    expect(notes_row).to_contain_text("Markdown")
    notes_row.get_by_text("Delete", exact=True).click()
    confirm = notes_row.get_by_role("button", name="Delete for good")
    # Named by its heading ("# Maintenance"), as its passages' pages name it.
    expect(notes_row).to_contain_text("Delete Maintenance and its 1 passage?")
    confirm.scroll_into_view_if_needed()
    no_sideways_scroll(page, "confirm")
    shot(page, "4-confirm")
    confirm.click()
    expect(page.get_by_text("Deleted Maintenance and its passages.")).to_be_visible()
    expect(page.locator("tr[data-document-id]")).to_have_count(1)
    assert not Document.objects.filter(pk=notes.pk).exists()

    # A research on it: the scripted model queries it and cites the PDF's passage.
    kb = f"kb://dataset/{pdf.dataset_id}/document/{pdf.pk}#0"
    topic = "How efficient did the Zephyrine turbines get?"
    scripted_llm.script(
        topic,
        call("query", question="turbines efficiency"),
        reply(f"# Efficiency\n\n> {QUOTE}.\n>\n> — [the quarterly report]({kb})\n"),
    )
    page.get_by_role("link", name="Start a research on it").click()
    expect(page.get_by_label("Knowledge base")).to_have_value(str(pdf.dataset_id))
    page.get_by_label("What should Canopy research?").fill(topic)
    page.get_by_role("button", name="Start research").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    root = Run.objects.get(topic=topic)
    assert root.dataset_id == pdf.dataset_id
    expect(page.locator("#run-status")).to_have_text("done")
    wait_for(lambda: Run.objects.get(pk=root.pk).report)
    link = page.locator("#report a.citation.verified")
    expect(link).to_have_count(1)
    query_result = scripted_llm.requests[-1]["messages"][-1]["content"]
    assert kb in query_result and QUOTE in query_result
    no_sideways_scroll(page, "report")
    shot(page, "5-report")

    # The citation opens the passage's page in a tab of its own, the quote highlighted.
    with page.context.expect_page() as opened:
        link.click()
    passage = opened.value
    passage.size_name = page.size_name
    expect(passage.locator("mark.quoted")).to_have_text(QUOTE)
    expect(passage.locator("#passage")).to_contain_text("Zephyrine turbine programme")
    expect(passage.get_by_role("link", name="Turbines")).to_be_visible()
    no_sideways_scroll(passage, "passage")
    shot(passage, "6-passage")

    # The list counts what is left in it.
    passage.get_by_role("link", name="Knowledge bases", exact=True).first.click()
    listed = passage.locator(f'tr[data-dataset-id="{pdf.dataset_id}"]')
    expect(listed).to_contain_text("Turbines")
    expect(listed.locator("td.num")).to_have_text(re.compile(r"^1( document)?$"))
    no_sideways_scroll(passage, "list")
    shot(passage, "7-list")


def test_two_passages_of_one_document_are_two_sources_named_apart(
    page, server, scripted_llm, alice
):
    """A report that cites two passages of one document listed two sources under one title,
    with nothing to tell them apart but where each link led. Each is named by its passage,
    counted as its page counts them, and opens that passage. The document's stored title is
    a slug, as the starter dataset's are: the report's links that name it, with or without
    a passage, show the document's heading."""
    first = "Tidal bores form where a rising tide funnels into a narrowing river mouth. "
    second = "The Severn bore runs upstream for miles on the highest spring tides. "
    text = "Tidal bores\n\n" + (first * 14) + "\n\n" + (second * 14)
    dataset = dataset_create(owner=alice, name="Estuaries")
    document = document_add(
        dataset=dataset, title="", data=text.encode(), filename="tidal-bores.txt"
    )
    others = document_add(
        dataset=dataset,
        title="Spring tides",
        data=b"Spring tides come twice a month, near the new and the full moon.",
        filename="s.txt",
    )
    last = document.chunks.count()
    assert last >= 2
    kb = f"kb://dataset/{dataset.pk}/document/{document.pk}#"
    spring = f"kb://dataset/{dataset.pk}/document/{others.pk}#0"
    topic = f"Where do tidal bores form? ({page.size_name})"
    scripted_llm.script(
        topic,
        call("query", question="tidal bore tide river spring"),
        reply(
            "# Tidal bores\n\n"
            f"A bore forms where the tide funnels into a river ([tidal-bores]({kb}0)). "
            f"The Severn's runs for miles ([tidal-bores]({kb}{last - 1})), "
            f"on spring tides ([Spring tides]({spring})).\n\n## Sources\n\n"
            f"- [tidal-bores, passage 1]({kb}0)\n- [tidal-bores, passage {last}]({kb}{last - 1})\n"
        ),
    )
    root = wait_finished(services.run_start(owner=alice, topic=topic, dataset_id=dataset.pk))
    assert root.status == "done", root.error
    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{root.pk}/")
    expect(page.locator("#run-status")).to_have_text("done")
    sources = page.get_by_role("region", name="Sources cited")
    expect(sources.locator(".citation-item a")).to_have_text(
        ["Tidal bores, passage 1", f"Tidal bores, passage {last}", "Spring tides"]
    )
    expect(sources.locator(".citation-item.verified")).to_have_count(3)
    expect(page.locator("#report li a.citation")).to_contain_text(
        ["Tidal bores, passage 1", f"Tidal bores, passage {last}"]
    )
    expect(page.locator("#report")).not_to_contain_text("tidal-bores")
    sources.scroll_into_view_if_needed()
    no_sideways_scroll(page, "sources")
    shot(page, "8-two-passages")

    with page.context.expect_page() as opened:
        sources.get_by_role("link", name=f"Tidal bores, passage {last}").click()
    passage = opened.value
    passage.size_name = page.size_name
    expect(passage.locator(".passage-meta")).to_contain_text(f"Passage {last} of the document")
    expect(passage.locator("#passage")).to_contain_text("The Severn bore runs upstream")
    no_sideways_scroll(passage, "passage")
    shot(passage, "9-passage")


def test_a_knowledge_base_is_deleted_from_its_page_after_a_confirmation(
    page, server, alice, run_factory
):
    """The knowledge-base pages could delete a document but not the knowledge base: only
    the API could. Its page's Delete asks first, names what goes, and the research that
    used it keeps its page. While a research that searches it has not ended (it waited for
    its analyst's answers, and went on without it), the delete is refused in words."""
    dataset = dataset_create(owner=alice, name=f"Old notes ({page.size_name})")
    for name in ("a.md", "b.md"):
        document_add(dataset=dataset, title=name, data=f"{NOTES} ({name})".encode(), filename=name)
    research = run_factory(owner=alice, dataset_id=dataset.pk)
    # It waits for its plan's review: no agent takes it meanwhile.
    assert services.run_claim(run_id=research.pk) is not None
    services.plan_write(root_id=research.pk, items=["Old notes"])
    assert services.plan_pause(root_id=research.pk)
    log_in(page, server, "alice")
    page.goto(f"{server.url}/kb/{dataset.pk}/")

    page.locator(".kb-actions").get_by_text("Delete", exact=True).click()
    page.locator(".kb-actions .confirm-box").get_by_role("button", name="Delete for good").click()
    expect(page).to_have_url(f"{server.url}/kb/{dataset.pk}/")
    expect(page.get_by_role("status")).to_have_text(
        f'Knowledge base "{dataset.name}" is searched by research {research.pk}, which has '
        "not ended: cancel it or let it end, then delete the knowledge base."
    )
    assert Document.objects.filter(dataset_id=dataset.pk).count() == 2
    no_sideways_scroll(page, "refused")
    shot(page, "10-delete-refused")
    services.run_finish(run_id=research.pk, report="# Notes")

    page.locator(".kb-actions").get_by_text("Delete", exact=True).click()
    confirm = page.locator(".kb-actions .confirm-box")
    expect(confirm).to_contain_text(f"Delete {dataset.name} with every document and passage")
    box = confirm.bounding_box()
    assert (
        box is not None and box["x"] >= 0 and box["x"] + box["width"] <= page.viewport_size["width"]
    )
    no_sideways_scroll(page, "confirm")
    shot(page, "10-delete-knowledge-base")
    confirm.get_by_role("button", name="Delete for good").click()

    expect(page).to_have_url(f"{server.url}/kb/")
    expect(page.get_by_role("status")).to_contain_text(
        f"Deleted {dataset.name} and its 2 documents."
    )
    expect(page.get_by_role("link", name=dataset.name)).to_have_count(0)
    assert not Document.objects.filter(dataset_id=dataset.pk).exists()
    assert Run.objects.get(pk=research.pk).dataset_id is None  # the research stays
    shot(page, "11-deleted")


def test_a_cited_passage_whose_document_was_deleted_says_so(page, server, scripted_llm, alice):
    """A tester deleted a document a finished report cited: its citations still opened
    "This page does not exist", with nothing on the report to say why. Sources cited says the
    document has since been deleted, and its link opens a page that says what happened and
    leads back to the knowledge base."""
    dataset = dataset_create(owner=alice, name=f"Estuaries ({page.size_name})")
    text = "# Tidal bores\n\n" + "A bore forms where the tide funnels into a river. " * 4
    document = document_add(dataset=dataset, title="", data=text.encode(), filename="bores.md")
    kb = f"kb://dataset/{dataset.pk}/document/{document.pk}#0"
    topic = f"Where do bores form? ({page.size_name})"
    scripted_llm.script(
        topic,
        call("query", question="tidal bore tide river"),
        reply(
            f"# Bores\n\nWhere the tide funnels into a river ([Tidal bores]({kb})), and more "
            f"([made up](kb://dataset/{dataset.pk}/document/999999#0)).\n"
        ),
    )
    root = wait_finished(services.run_start(owner=alice, topic=topic, dataset_id=dataset.pk))
    assert root.status == "done", root.error
    services.document_delete(document=document)

    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{root.pk}/")
    sources = page.get_by_role("region", name="Sources cited")
    expect(sources.locator(".citation-note")).to_have_text(
        [
            "knowledge base · seen by the root agent · its document has since been deleted "
            "from the knowledge base",
            "no agent of this research saw this passage",  # flagged, not "deleted"
        ]
    )
    sources.scroll_into_view_if_needed()
    no_sideways_scroll(page, "a deleted document's source")
    shot(page, "10-deleted-source")

    with page.context.expect_page() as opened:
        page.locator("#report a.citation").first.click()
    gone = opened.value
    gone.size_name = page.size_name
    expect(gone.get_by_role("heading", level=1)).to_have_text(
        "This passage is not in your knowledge bases"
    )
    expect(gone.locator("main")).to_contain_text(f"from {dataset.name}")
    gone.get_by_role("link", name=f"Open {dataset.name}").click()
    expect(gone.get_by_role("heading", name=dataset.name)).to_be_visible()
    no_sideways_scroll(gone, "the knowledge base")
    gone.go_back()
    no_sideways_scroll(gone, "the deleted passage")
    shot(gone, "11-deleted-passage")


def test_a_knowledge_base_is_searched_from_its_page(page, server, alice):
    """A knowledge base of 79 documents listed them all, 14,330 px on a phone, with no way
    to find a passage but the API. Its page searches the passages as an agent's query does:
    each found passage named as a report's sources are, its words marked, one click away."""
    dataset = dataset_create(owner=alice, name=f"Estuaries ({page.size_name})")
    funnel = "A bore forms where the tide funnels into a narrowing river. " * 6
    severn = "The Severn bore runs upstream for miles on the highest spring tides. "
    document_add(
        dataset=dataset, title="", data=f"# Tidal bores\n\n{funnel}\n\n{severn}".encode(),
        filename="bores.md",
    )  # fmt: skip
    for number in range(12):
        document_add(
            dataset=dataset,
            title=f"Notes {number}",
            data=f"Herons wade in the shallows ({number}).".encode(),
            filename=f"n{number}.txt",
        )  # fmt: skip
    log_in(page, server, "alice")
    page.goto(f"{server.url}/kb/{dataset.pk}/")
    search = page.get_by_role("search")
    search.get_by_role("searchbox").fill("Severn upstream")
    search.get_by_role("button", name="Search").click()

    expect(page.locator("#kb-found")).to_have_text(
        "1 passage best matching “Severn upstream”, best first: what an agent's query finds."
    )
    found = page.get_by_role("list", name="Passages found").locator("li")
    expect(found.get_by_role("link")).to_have_text(["Tidal bores, passage 1"])
    expect(found.locator("mark")).to_have_text(["Severn", "upstream"])
    expect(search.get_by_role("searchbox")).to_have_value("Severn upstream")
    no_sideways_scroll(page, "search results")
    shot(page, "12-search")
    found.get_by_role("link").click()
    expect(page.locator("#passage")).to_contain_text("The Severn bore runs upstream")

    page.go_back()
    search.get_by_role("searchbox").fill("kestrels")
    search.get_by_role("button", name="Search").click()
    expect(page.locator("#kb-found")).to_have_text(
        "No passage matches “kestrels”. Try other words, or fewer of them."
    )
