"""Follow-ups in Debian's Chromium against a real daphne, at a desktop's and a phone's size:
"Ask a follow-up" under a done report starts a research in its thread, whose report cites the
earlier research's source as verified; the page and the runs list show the thread.

Screenshots go to SCREENSHOTS (default /tmp/shots-h-d) to be looked at.
"""

import re
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser, Page, expect

from agents.llm.scripted import call, reply
from research import services
from research.models import Citation, Run
from tests import browsing
from tests.browsing import SIZES
from tests.conftest import wait_finished
from tests.test_browser import (  # noqa: F401  (fixtures)
    browser,
    log_in,
    server,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = browsing.screenshots("/tmp/canopy-followups")
EARLIER = "When did the river otters come back to the valley?"
FOLLOWUP = "Follow-up: which fish do the otters that came back eat in winter?"


@pytest.fixture
def pages(browser: Browser):  # noqa: F811
    """A page at each size, in contexts of their own; JavaScript errors fail the test."""
    contexts, errors = [], []

    def open_page(size: str) -> Page:
        width, height = SIZES[size]
        context = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(context)
        page = context.new_page()
        page.size_name = size
        page.on("pageerror", lambda error: errors.append(str(error)))
        return page

    yield open_page
    for context in contexts:
        context.close()
    assert errors == [], "the page raised JavaScript errors"


def shot(page: Page, name: str, *, full_page: bool = True) -> None:
    browsing.shot(page, SCREENSHOTS, name, full_page=full_page)


def fits_the_width(page: Page) -> None:
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"the page is {overflow}px wider than the {page.size_name} screen"


def test_a_followup_asked_on_the_page_starts_a_thread(pages, server, web, scripted_llm, alice):  # noqa: F811
    article = f"{web.url}/article"
    scripted_llm.script(
        EARLIER,
        call("write_plan", items=["When the otters came back", "Who counted them"]),
        call("read_page", url=article),
        reply(f"# Otters\n\nThe otters came back in 2019 ([the article]({article})).\n"),
    )
    earlier = wait_finished(services.run_start(owner=alice, topic=EARLIER), timeout=30)
    assert earlier.status == "done", earlier.error
    # One server for both sizes: each asks its own follow-up of the same research.
    for number, size in enumerate(SIZES, start=1):
        question = f"{FOLLOWUP} (asked on the {size})"
        scripted_llm.script(
            question,
            reply(
                "# What the otters eat\n\nTrout, mostly, by the valley's own count, which the "
                f"earlier research read ([the article]({article}))."
            ),
        )
        ask_a_followup(pages(size), server, earlier, question, number)


def ask_a_followup(page: Page, web_server, earlier: Run, question: str, number: int) -> None:
    """Ask `question` under the earlier report at the page's size: the `number`th follow-up."""
    url = web_server.url
    log_in(page, web_server, "alice")
    page.goto(f"{url}/runs/{earlier.pk}/")
    form = page.get_by_role("region", name="Ask a follow-up")
    expect(form).to_be_visible()
    form.get_by_role("button", name="Ask a follow-up").click()  # no question yet
    expect(form.get_by_role("alert")).to_have_text("The follow-up question must not be empty.")
    assert Run.objects.filter(follows=earlier).count() == number - 1
    form.scroll_into_view_if_needed()
    shot(page, "followup-refused", full_page=False)
    fits_the_width(page)
    # Answered at the form's address, the page shows its own: a reload opens the page again,
    # not "This address is an action, not a page".
    assert urlparse(page.url).path == f"/runs/{earlier.pk}/"
    page.reload()
    expect(page.get_by_role("heading", level=1)).to_have_text(EARLIER)
    expect(form).to_be_visible()
    form.get_by_label("Your follow-up question").fill(question)
    page.wait_for_timeout(300)  # the page must not draw the stage again over the question
    expect(form.get_by_label("Your follow-up question")).to_have_value(question)
    form.get_by_role("button", name="Ask a follow-up").click()

    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    followup_id = int(re.search(r"/runs/(\d+)/$", page.url).group(1))
    assert Run.objects.get(pk=followup_id).follows_id == earlier.pk
    thread = page.get_by_role("navigation", name="In this thread")
    expect(thread.get_by_role("link", name=EARLIER)).to_be_visible()
    expect(thread.locator("[aria-current=page]")).to_contain_text(question)
    expect(page.locator("#report")).to_contain_text("Trout, mostly", timeout=30_000)
    sources = page.get_by_role("region", name="Sources cited")
    expect(sources.locator(".citation-item.verified")).to_contain_text(
        "Otters return to the valley"
    )
    expect(sources).to_contain_text("from the earlier research")
    # The report's own mark says the same: not "an agent of this research saw this source".
    expect(page.locator("#report a.citation.verified")).to_have_attribute(
        "title", "verified: an agent of the earlier research in this thread saw this source"
    )
    assert Citation.objects.get(run_id=followup_id).verified
    shot(page, "followup-report")
    fits_the_width(page)

    page.goto(f"{url}/runs/{earlier.pk}/")
    earlier_thread = page.get_by_role("navigation", name="In this thread")
    expect(earlier_thread.get_by_role("link", name=question)).to_be_visible()

    page.goto(f"{url}/")
    rows = page.locator("tr[data-run-id]")
    expect(rows.filter(has_text=question).locator(".thread-mark")).to_have_text(
        f"Follows up {EARLIER}"
    )
    followups = f"{number} follow-up{'s' if number > 1 else ''}"
    expect(rows.filter(has_text=followups).locator("td.topic-cell > a")).to_have_text(EARLIER)
    shot(page, "followup-list")
    fits_the_width(page)
