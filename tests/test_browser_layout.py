"""The page's layout against what analysts paste, in Debian's Chromium against a real daphne,
at 1440x900 and on a phone (390x844): a topic holding a long web address (one word of 300
characters), a plan item as long, a plan read on a phone, and what an action reports.

Screenshots go to SCREENSHOTS (default /tmp/canopy-layout) to be looked at.
"""

import pytest
from playwright.sync_api import Browser, Page, expect

from research import services
from tests import browsing
from tests.browsing import SIZES, no_sideways_scroll, sized_page
from tests.test_browser import browser, log_in, server  # noqa: F401  (fixtures)
from tests.test_browser_library import _ended, row

# ruff: noqa: F811  (pytest fixtures imported from tests.test_browser)
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = browsing.screenshots("/tmp/canopy-layout")
ADDRESS = "https://example.org/tides/" + "x" * 280


@pytest.fixture(params=list(SIZES))
def page(request, browser: Browser):
    yield from sized_page(browser, request.param)


def shot(page: Page, name: str) -> None:
    browsing.shot(page, SCREENSHOTS, name, full_page=True)


def inside(box: dict, within: dict) -> bool:
    return (
        box["x"] >= within["x"] - 1 and box["x"] + box["width"] <= within["x"] + within["width"] + 1
    )


def test_a_pasted_address_wraps_in_the_list_and_on_the_run_page(page, server, alice):
    """A topic with a 300-character address ran over the list's other columns and pushed
    its row's actions out of the card; on a phone it cut every row. Its plan item ran across
    the agent panel and off the page."""
    topic = f"Explain this page about tides please {ADDRESS}"
    research = services.run_start(owner=alice, topic=topic)
    services.run_claim(run_id=research.pk)
    services.plan_write(
        root_id=research.pk, items=[f"What {ADDRESS[:180]} says", "Spring and neap tides"]
    )
    _ended(research, report="# Tides\n\nThe moon pulls the sea.")
    other = _ended(services.run_start(owner=alice, topic="How do tides work?"), report="Moon.")

    log_in(page, server, "alice")
    long_row, other_row = row(page, research), row(page, other)
    expect(long_row).to_contain_text("Explain this page about tides")
    no_sideways_scroll(page, "the list")
    card = page.locator(".runs-table").bounding_box()
    for listed in (long_row, other_row):
        for action in listed.locator("button, a").all():
            if action.is_visible():
                assert inside(action.bounding_box(), card), action.inner_text()
    # The long topic wraps within its cell: it covers no other column of its row.
    topic_box = long_row.locator(".topic-cell").bounding_box()
    status_box = long_row.locator("[data-status]").first.bounding_box()
    if page.size_name == "desktop":
        assert topic_box["x"] + topic_box["width"] <= status_box["x"] + 1
    shot(page, "list-with-an-address")

    page.goto(f"{server.url}/runs/{research.pk}/")
    items = page.locator("#plan-items .plan-item")
    expect(items).to_have_count(2)
    no_sideways_scroll(page, "the run page")
    plan, words = page.evaluate(  # in one go: the plan is drawn again as events come
        """() => ["#plan-card", "#plan-items .plan-item .plan-text"].map(
          (part) => document.querySelector(part).getBoundingClientRect().toJSON())"""
    )
    assert inside(words, plan)
    page.locator("#plan-card").scroll_into_view_if_needed()
    shot(page, "run-with-an-address")


def test_a_plan_item_takes_its_line_and_its_status_follows_on_a_phone(page, server, alice):
    """On a phone a plan item's words were squeezed into a narrow column beside its status
    and agents ("by moon" on two lines); its words now take the line, the rest under them."""
    research = services.run_start(owner=alice, topic="Tides: moon, sun and coasts")
    services.run_claim(run_id=research.pk)
    services.plan_write(
        root_id=research.pk,
        items=["How the moon's pull raises two bulges of water", "Why spring tides are higher"],
    )
    _ended(research, report="# Tides\n\nThe moon pulls the sea.")

    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{research.pk}/")
    item = page.locator("#plan-items .plan-item").first
    expect(item.locator(".plan-status")).to_be_visible()
    # Read in one go: the plan is drawn again as its events come, and a box read from an
    # item drawn over meanwhile would be none.
    words, body, status = page.evaluate(
        """() => {
          const item = document.querySelector("#plan-items .plan-item");
          return [".plan-text", ".plan-body", ".plan-status"].map(
            (part) => item.querySelector(part).getBoundingClientRect().toJSON());
        }"""
    )
    if page.size_name == "phone":
        # The words span the item's width; the status sits on a line below them.
        assert words["width"] >= body["width"] * 0.8, (words, body)
        assert status["y"] >= words["y"] + words["height"] - 1, (status, words)
    else:
        # Room enough: words, status and agents on one line, the status right after the words.
        assert abs(status["y"] - words["y"]) < words["height"], (status, words)
    no_sideways_scroll(page, "the plan")
    page.locator("#plan-card").scroll_into_view_if_needed()
    shot(page, "plan")


def test_what_an_action_did_is_said_in_a_box_of_its_own(page, server, alice):
    """ "Deleted the research ..." read as body text above the card; it is a status box now."""
    research = _ended(services.run_start(owner=alice, topic="Salmon runs"), report="Fish.")
    log_in(page, server, "alice")
    listed = row(page, research)
    listed.get_by_text("Delete", exact=True).click()
    listed.locator(".confirm-box").get_by_role("button", name="Delete for good").click()
    said = page.locator(".flash li")
    expect(said).to_have_text("Deleted the research “Salmon runs”.")
    style = said.evaluate(
        "node => { const s = getComputedStyle(node);"
        " return [s.backgroundColor, s.borderTopStyle, s.paddingTop]; }"
    )
    body = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert style[0] not in (body, "rgba(0, 0, 0, 0)") and style[1] == "solid", style
    assert float(style[2].removesuffix("px")) > 0
    no_sideways_scroll(page, "after a delete")
    shot(page, "deleted")
