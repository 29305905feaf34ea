"""A citation's passage page brings the quoted words into view, in Debian's Chromium against a
real daphne at 1440x900 and on a phone (390x844).

An analyst following a citation on a phone landed on the top of the passage's page, the
highlighted quote (<mark>) below the fold at y=832 to 937 of an 844-pixel screen. On arrival
the marked words are in view, with some of what leads into them above; at a desktop's size
too when they would be below its fold; smoothly, or at once for an analyst who asked for
reduced motion. A page with nothing marked does not move.

Screenshots go to SCREENSHOTS (default /tmp/canopy-round32-passage) to be looked at.
"""

import pytest
from playwright.sync_api import Browser, Page, expect

from research.models import Chunk
from research.services.datasets import dataset_create, document_add
from tests import browsing
from tests.browsing import SIZES, no_sideways_scroll, sized_page
from tests.conftest import demo_on_starter, wait_finished
from tests.test_browser import browser, log_in, server  # noqa: F401  (fixtures)

# ruff: noqa: F811  (pytest fixtures imported from tests.test_browser)
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = browsing.screenshots("/tmp/canopy-round32-passage")
QUOTE = "The last ferry of the day leaves Oban for Craignure at nine"
# A timetable of short lines: its passages stand taller than any screen, the quote deep in one.
LINES = [f"Pier {n}: {n % 12 + 1} o'clock." for n in range(60)]
TIMETABLE = "\n".join([*LINES[:45], QUOTE + " in summer.", *LINES[45:]] * 3)


@pytest.fixture(params=list(SIZES))
def page(request, browser: Browser):
    yield from sized_page(browser, request.param)


def shot(page: Page, name: str, *, full_page: bool = False) -> None:
    browsing.shot(page, SCREENSHOTS, name, full_page=full_page)


def mark_box(page: Page) -> dict:
    return page.evaluate(
        "document.querySelector('#passage mark.quoted').getBoundingClientRect().toJSON()"
    )


def settled(page: Page) -> None:
    """Wait until a smooth scroll has come to rest."""
    seen = [page.evaluate("window.scrollY")]
    while len(seen) < 2 or seen[-1] != seen[-2]:
        page.wait_for_timeout(250)
        seen.append(page.evaluate("window.scrollY"))
        assert len(seen) < 40, f"the page never came to rest: {seen}"


def in_view_with_context(page: Page, moment: str) -> dict:
    """The first mark wholly on the screen, with at least a few lines of text above it."""
    box = mark_box(page)
    height = page.viewport_size["height"]
    assert box["top"] >= 60 and box["bottom"] <= height, f"{moment}: {box} of {height}"
    return box


def timetable(alice) -> str:
    """The address of the timetable's passage that holds QUOTE deepest in it."""
    dataset = dataset_create(owner=alice, name="Ferries")
    document_add(dataset=dataset, title="Timetable", data=TIMETABLE.encode(), filename="t.txt")
    chunks = Chunk.objects.filter(document__dataset=dataset, text__contains=QUOTE)
    chunk = max(chunks, key=lambda chunk: chunk.text.index(QUOTE))
    return f"/kb/{dataset.pk}/documents/{chunk.document_id}/passages/{chunk.position}/"


def test_a_quote_below_the_fold_is_brought_into_view(page, server, alice):
    address = timetable(alice)
    log_in(page, server, "alice")

    # Without a quote, or with one the passage does not hold, the page stays at its top.
    page.goto(f"{server.url}{address}")
    expect(page.locator("#passage")).to_be_visible()
    page.wait_for_timeout(800)
    assert page.evaluate("window.scrollY") == 0
    page.goto(f"{server.url}{address}?q=the+night+boat+to+Mull")
    expect(page.locator("#passage + *, .alert").first).to_be_visible()
    page.wait_for_timeout(800)
    assert page.evaluate("window.scrollY") == 0

    # With the quote: it was below the fold of the page at its top; it comes into view.
    page.goto(f"{server.url}{address}?q={QUOTE.replace(' ', '+')}")
    mark = page.locator("#passage mark.quoted")
    expect(mark).to_have_text(QUOTE)
    top_of_page = page.evaluate(
        "document.querySelector('#passage mark.quoted').getBoundingClientRect().top"
        " + window.scrollY"
    )
    assert top_of_page > page.viewport_size["height"], "the test's quote should start unseen"
    expect(mark).to_be_in_viewport(ratio=1)
    settled(page)
    in_view_with_context(page, "after a smooth scroll")
    no_sideways_scroll(page, "the passage")
    shot(page, "1-quote-in-view")

    # Reloaded, the page keeps the analyst's place (here, its top): no jump to the quote.
    page.evaluate("window.scrollTo(0, 0)")
    page.reload()
    expect(mark).to_be_visible()
    page.wait_for_timeout(800)
    assert page.evaluate("window.scrollY") < 20


def test_with_reduced_motion_the_quote_is_in_view_at_once(page, server, alice):
    address = timetable(alice)
    log_in(page, server, "alice")
    page.emulate_media(reduced_motion="reduce")
    page.goto(f"{server.url}{address}?q={QUOTE.replace(' ', '+')}")
    # No animation: in view as the page's load ends, without waiting for a scroll.
    in_view_with_context(page, "on load, reduced motion")
    shot(page, "2-reduced-motion")


def test_a_citation_of_a_demo_report_opens_on_its_quote(page, server, alice):
    """The analyst's own path: a done report's citation of the Python reference."""
    done = demo_on_starter(alice, "How do Python's context managers and exceptions interact?")
    assert wait_finished(done, timeout=40).status == "done"
    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{done.pk}/")
    citation = page.locator('#report-stage a[href*="/passages/"][href*="?q="]').first
    citation.scroll_into_view_if_needed()
    with page.context.expect_page() as opened:
        citation.click()
    passage = opened.value
    passage.size_name = page.size_name
    mark = passage.locator("#passage mark.quoted").first
    expect(mark).to_be_visible()
    expect(mark).to_be_in_viewport(ratio=1)
    passage.wait_for_timeout(800)
    box = mark_box(passage)
    assert box["bottom"] <= passage.viewport_size["height"], box
    no_sideways_scroll(passage, "the cited passage")
    shot(passage, "3-cited-passage")
