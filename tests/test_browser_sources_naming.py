"""A knowledge-base passage as the analyst meets it, in Debian's Chromium against a real
daphne, at 1440x900 and on a phone (390x844). The document is a Markdown file that opens
with "# Tidal bores", stored under its file's name ("tidal-bores"):

- the report's own list of sources opens each passage without a made-up quote (no false
  "the quoted words do not appear" warning); a finding's citation keeps its highlight;
- the passage's page, its tab, the report and the knowledge base's list of documents all
  say "Tidal bores", never "# Tidal bores" nor "tidal-bores" (the file name stays, greyed);
- the passage's page shows what comes just before and just after it, nothing twice;
- a passage named in a message between agents reads as words, in the live feed and in the
  sender's panel, and opens the passage.

Screenshots go to SCREENSHOTS (default /tmp/srcshots) to be looked at.
"""

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from agents.llm.scripted import call, calls, reply
from research import services
from research.models import Dataset
from research.services.datasets import document_add
from tests import browsing
from tests.browsing import SIZES, no_sideways_scroll, sized_page
from tests.conftest import wait_finished
from tests.test_browser import browser, log_in, server  # noqa: F401  (fixtures)
from tests.test_run_page import agent

# ruff: noqa: F811  (pytest fixtures imported from tests.test_browser)
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = browsing.screenshots("/tmp/srcshots")
SENTENCES = " ".join(f"Bore {n} runs up river number {n} at dawn." for n in range(90))
MARKDOWN = f"# Tidal bores\n\n{SENTENCES}\n"


@pytest.fixture(params=list(SIZES))
def page(request, browser: Browser):
    yield from sized_page(browser, request.param)


def shot(page: Page, name: str, *, full_page: bool = True) -> None:
    browsing.shot(page, SCREENSHOTS, name, full_page=full_page)


def opened_from(page: Page, link) -> Page:
    with page.context.expect_page() as opened:
        link.click()
    tab = opened.value
    tab.size_name = page.size_name
    return tab


def test_a_passage_is_named_by_its_heading_and_opened_as_cited(page, server, scripted_llm, alice):
    dataset = Dataset.objects.create(owner=alice, name="Estuaries")
    document = document_add(
        dataset=dataset, title="", data=MARKDOWN.encode(), filename="tidal-bores.md"
    )
    assert document.title == "tidal-bores" and document.chunks.count() >= 3
    middle = document.chunks.get(position=1).text
    claim = "Bore 40 runs up river number 40 at dawn"
    assert claim in middle
    kb = f"kb://dataset/{dataset.pk}/document/{document.pk}#1"
    topic = f"Where do tidal bores run? ({page.size_name})"
    history, ecology = f"HISTORY {topic}", f"ECOLOGY {topic}"
    scripted_llm.script(
        topic,
        call("query", question="bore river dawn"),
        calls(
            call("spawn_subagent", name="history", reason="dates", task=history),
            call("spawn_subagent", name="ecology", reason="rivers", task=ecology),
        ),
        call("wait_subagents"),
        reply(
            "# Tidal bores\n\n## Findings\n\n"
            f"> {claim}.\n>\n> — [tidal-bores]({kb})\n\n"
            "### spring (done)\n\n"
            "> No passage of the knowledge base matches 'Spring and neap tides'.\n\n"
            f"## Sources\n\n- [tidal-bores, passage 2]({kb})\n"
        ),
    )
    scripted_llm.script(
        history, call("send_message", to="ecology", text=f"Read {kb}."), reply("History.")
    )
    scripted_llm.script(ecology, call("read_messages", wait_seconds=20), reply("Ecology."))
    root = services.run_start(owner=alice, topic=topic, dataset_id=dataset.pk)
    assert wait_finished(root, timeout=30).status == "done"

    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{root.pk}/")
    expect(page.locator("#run-status")).to_have_text("done")
    report = page.locator("#report")
    finding = report.locator("blockquote a.citation")
    listed = report.locator("#report-sources + ul a.citation")
    expect(finding).to_have_text(re.compile(r"^Tidal bores\b"))
    expect(listed).to_have_text(re.compile(r"^Tidal bores, passage 2\b"))
    expect(report).not_to_contain_text("tidal-bores")
    expect(report).not_to_contain_text("# Tidal")
    # A list of sources has no sentence of its own to quote: its link quotes nothing.
    expect(listed).not_to_have_attribute("href", re.compile(r"\?q="))
    expect(finding).to_have_attribute("href", re.compile(r"\?q=Bore\+40"))
    listed.scroll_into_view_if_needed()
    no_sideways_scroll(page, "report")
    shot(page, "1-report", full_page=False)

    # Opened from the list: the passage, whole, and no warning about words it never quoted.
    passage = opened_from(page, listed)
    expect(passage.get_by_role("heading", level=1)).to_have_text("Tidal bores")
    expect(passage).to_have_title(re.compile(r"^Tidal bores: passage 2"))
    expect(passage.locator("#passage")).to_contain_text(claim)
    expect(passage.locator(".alert")).to_have_count(0)
    expect(passage.locator("mark.quoted")).to_have_count(0)
    # Just before it, the end of the passage before; just after it, what follows it.
    before = passage.locator("#passage-before").inner_text().removeprefix("…")
    after = passage.locator("#passage-after").inner_text().removesuffix("…")
    text = " ".join(f"{before} {middle} {after}".split())
    assert text in " ".join(MARKDOWN.split()), (before[-80:], after[:80])
    no_sideways_scroll(passage, "passage from the list")
    shot(passage, "2-passage-from-list")
    passage.close()

    # Opened from the finding: its quote highlighted.
    quoted = opened_from(page, finding)
    expect(quoted.locator("mark.quoted")).to_have_text(claim)
    expect(quoted.locator(".alert")).to_have_count(0)
    quoted.locator("mark.quoted").scroll_into_view_if_needed()
    shot(quoted, "3-passage-from-finding", full_page=False)
    quoted.close()

    # The live feed, drawn by the page's script with its knowledge base's headings: the
    # passage named as the panel and the report name it, opening it.
    path = f"/kb/{dataset.pk}/documents/{document.pk}/passages/1/"
    feed = page.locator("#message-feed .feed-text")
    expect(feed).to_have_count(1)
    words = "Tidal bores, passage 2"
    expect(feed.locator("a")).to_have_text([words])
    expect(feed.get_by_role("link", name=words)).to_have_attribute("href", path)
    expect(feed).not_to_contain_text("kb://")
    no_sideways_scroll(page, "feed")
    shot(page, "4-feed")

    # The sender's panel, drawn by the server: the passage by its document's title.
    agent(page, "history").click()
    panel = page.locator("#panel .feed-text")
    expect(panel.locator("a")).to_have_text(["Tidal bores, passage 2"])
    expect(panel.get_by_role("link", name="Tidal bores, passage 2")).to_have_attribute("href", path)
    no_sideways_scroll(page, "panel")
    shot(page, "5-panel")
    from_panel = opened_from(page, panel.get_by_role("link"))
    expect(from_panel.get_by_role("heading", level=1)).to_have_text("Tidal bores")
    from_panel.close()

    # The knowledge base's list: the same title, the file's name greyed below it.
    page.goto(f"{server.url}/kb/{dataset.pk}/")
    row = page.locator(f'tr[data-document-id="{document.pk}"]')
    expect(row.locator(".document-title a")).to_have_text("Tidal bores")
    expect(row.locator(".document-source")).to_have_text("tidal-bores.md")
    row.scroll_into_view_if_needed()
    no_sideways_scroll(page, "documents")
    shot(page, "6-documents")
