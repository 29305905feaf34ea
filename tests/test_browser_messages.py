"""Sources named in messages, in Debian's Chromium against a real daphne, at 1440x900 and on a
phone (390x844): a sibling's message that names a web page and a knowledge-base passage shows
both as links, in the page's feed (drawn by its script from the socket) and in the sender's
panel (drawn by the server), a passage by its document's heading; the passage's link opens
the passage, and markup stays text.

Screenshots go to SCREENSHOTS (default /tmp/canopy-messages) to be looked at.
"""

import pytest
from playwright.sync_api import Browser, Page, expect

from agents.llm.scripted import call, calls, reply
from research import services
from research.models import Dataset
from research.services.datasets import document_add
from tests import browsing
from tests.browsing import SIZES, no_sideways_scroll, sized_page
from tests.conftest import wait_finished
from tests.test_browser import XSS, browser, log_in, server  # noqa: F401  (fixtures)
from tests.test_run_page import agent

# ruff: noqa: F811  (pytest fixtures imported from tests.test_browser)
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = browsing.screenshots("/tmp/canopy-messages")
PASSAGE = "The otter census of 2019 counted forty animals along the lower river."


@pytest.fixture(params=list(SIZES))
def page(request, browser: Browser):
    yield from sized_page(browser, request.param)


def shot(page: Page, name: str) -> None:
    browsing.shot(page, SCREENSHOTS, name, full_page=True)


def test_a_source_named_in_a_message_is_a_link_to_it(page, server, web, scripted_llm, alice):
    dataset = Dataset.objects.create(owner=alice, name="Rivers")
    census = document_add(
        dataset=dataset, title="Census", data=PASSAGE.encode(), filename="census.txt"
    )
    kb = f"kb://dataset/{dataset.pk}/document/{census.pk}#0"
    # A passage of another of alice's knowledge bases, not the research's own.
    other = Dataset.objects.create(owner=alice, name="Ledgers")
    ledger = document_add(dataset=other, title="Ledger", data=b"Forty otters.", filename="l.txt")
    kb_other = f"kb://dataset/{other.pk}/document/{ledger.pk}#0"
    article = f"{web.url}/article"
    text = (
        f"The count is in {article}. The census too ({kb}), and the ledger ({kb_other}). "
        f"{XSS} (https://[citation needed])"
    )
    topic = f"Otters on the lower river ({page.size_name})"
    history, ecology = f"HISTORY {topic}", f"ECOLOGY {topic}"
    scripted_llm.script(
        topic,
        calls(
            call("spawn_subagent", name="history", reason="dates", task=history),
            call("spawn_subagent", name="ecology", reason="food", task=ecology),
        ),
        call("wait_subagents"),
        reply("Root report."),
    )
    scripted_llm.script(
        history, call("send_message", to="ecology", text=text), reply("History report.")
    )
    scripted_llm.script(ecology, call("read_messages", wait_seconds=20), reply("Ecology report."))
    root = services.run_start(owner=alice, topic=topic, dataset_id=dataset.pk)
    assert wait_finished(root, timeout=30).status == "done"
    passage = f"/kb/{dataset.pk}/documents/{census.pk}/passages/0/"
    ledger_passage = f"/kb/{other.pk}/documents/{ledger.pk}/passages/0/"
    # A passage reads as words: by its document's title, in the panel the server draws and in
    # the feed the page's script draws, which knows the research's knowledge base's headings;
    # a passage of another knowledge base by its numbers there, by its title in the panel.
    named, numbered = "Census, passage 1", f"passage 1 of document {ledger.pk}"

    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{root.pk}/")

    # The feed, drawn by the page's script: two links, the rest of the text as text.
    feed = page.locator("#message-feed .feed-text")
    expect(feed).to_have_count(1)
    expect(feed.locator("a")).to_have_text([article, named, numbered])
    expect(feed.get_by_role("link", name=article)).to_have_attribute("href", article)
    expect(feed.get_by_role("link", name=named)).to_have_attribute("href", passage)
    expect(feed.get_by_role("link", name=numbered)).to_have_attribute("href", ledger_passage)
    expect(feed).to_contain_text(
        f"The count is in {article}. The census too ({named}), and the ledger ({numbered}). "
        "<script>"
    )
    expect(feed).to_contain_text("(https://[citation needed])")  # no address: text
    expect(feed.locator("script, img")).to_have_count(0)
    no_sideways_scroll(page, "feed")
    shot(page, "1-feed")

    # The sender's panel (its node, its row on a phone), drawn by the server: the same links.
    agent(page, "history").click()
    panel_text = page.locator("#panel .feed-text")
    expect(panel_text.locator("a")).to_have_text([article, named, "Ledger, passage 1"])
    expect(panel_text.get_by_role("link", name=named)).to_have_attribute("href", passage)
    expect(panel_text).to_contain_text("<script>")
    expect(page.locator("#panel script, #panel img")).to_have_count(0)
    no_sideways_scroll(page, "panel")
    shot(page, "2-panel")

    # The passage's link opens the passage, in a tab of its own.
    with page.context.expect_page() as opened:
        feed.get_by_role("link", name=named).click()
    tab = opened.value
    tab.size_name = page.size_name
    expect(tab.locator("#passage")).to_have_text(PASSAGE)
    no_sideways_scroll(tab, "passage")
    shot(tab, "3-passage")
    assert page.evaluate("window.pwned") is None
