"""What the run page says of a research that works, waits or has ended, in Debian's Chromium
against a real daphne at 1440x900 and on a phone (390x844).

An analyst found two things that said "running" of researches that were not:

- The agents' card showed a green "● Live" on researches done or cancelled: the socket's
  state, read as the research's. Once the research has ended it says so ("Research done",
  "Research cancelled") in grey; while it works, "Live" still tells a page that follows it
  from one that lost its connection.
- Cancelling a research that waits for its plan's review, or for answers to its questions,
  offered to "Keep it running"; it is waiting for the analyst. The dialog says what it waits
  for and offers to keep it waiting; a research at work is still kept running.

Screenshots go to SCREENSHOTS (default /tmp/canopy-round32-words) to be looked at.
"""

import pytest
from playwright.sync_api import Browser, Page, expect

from agents.llm.scripted import call, reply
from research import services
from research.models import Run
from tests import browsing
from tests.browsing import SIZES, no_sideways_scroll, sized_page
from tests.conftest import wait_for
from tests.test_browser import browser, log_in, server  # noqa: F401  (fixtures)

# ruff: noqa: F811  (pytest fixtures imported from tests.test_browser)
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = browsing.screenshots("/tmp/canopy-round32-words")
REVIEW = "your review of its plan"
ANSWERS = "your answers to its questions"


@pytest.fixture(params=list(SIZES))
def page(request, browser: Browser):
    yield from sized_page(browser, request.param)


def shot(page: Page, name: str, *, full_page: bool = False) -> None:
    browsing.shot(page, SCREENSHOTS, name, full_page=full_page)


def colour(page: Page, selector: str, what: str = "color") -> str:
    return page.evaluate(f"getComputedStyle(document.querySelector('{selector}')).{what}")


def dot(page: Page) -> str:
    return page.evaluate(
        "getComputedStyle(document.getElementById('connection'), '::before').backgroundColor"
    )


def paused(run: Run) -> None:
    wait_for(lambda: Run.objects.get(pk=run.pk).status == "paused", message="it never waited")


def open_cancel(page: Page):
    page.locator("#cancel-research").click()
    dialog = page.locator("#cancel-dialog")
    expect(dialog).to_be_visible()
    return dialog


def keep(page: Page, dialog, words: str) -> None:
    """Leave the dialog by its way out, which reads `words`: nothing is cancelled."""
    way_out = dialog.get_by_role("button", name=words, exact=True)
    expect(way_out).to_be_visible()
    way_out.click()
    expect(dialog).to_be_hidden()


def test_a_waiting_research_is_kept_waiting_and_an_ended_one_is_not_live(
    page, server, scripted_llm, alice
):
    size = page.size_name
    review_topic = f"Dippers ({size}): how do they feed underwater?"
    scripted_llm.script(
        review_topic,
        call("write_plan", items=["Dives", "Prey"]),
        reply("# Dippers\n\nThey walk along the bottom of fast streams."),
    )
    answers_topic = f"Kingfishers ({size}): which rivers?"
    scripted_llm.script(
        answers_topic,
        call("ask_clarifying_questions", questions=["Which country's rivers?"]),
        reply("# Kingfishers\n\nClear, slow rivers."),
    )
    working_topic = f"Herons ({size}): why on one leg?"
    slow = f"SLOW-TASK ({size}): the evidence"
    scripted_llm.script(  # at work until cancelled: its sub-agent waits for a message
        working_topic,
        call("spawn_subagent", name="slow", reason="a facet", task=slow),
        call("wait_subagents"),
        reply("never"),
    )
    scripted_llm.script(slow, call("read_messages", wait_seconds=60), reply("never"))
    review = services.run_start(owner=alice, topic=review_topic, review_plan=True)
    answers = services.run_start(owner=alice, topic=answers_topic, clarify=True)
    working = services.run_start(owner=alice, topic=working_topic)
    paused(review)
    paused(answers)
    log_in(page, server, "alice")
    connection = page.locator("#connection")

    # Waiting for the plan's review: live, and cancelling it would end a wait, not a run.
    page.goto(f"{server.url}/runs/{review.pk}/")
    expect(page.locator("#plan-review")).to_be_visible()
    expect(connection).to_have_text("Live")
    expect(connection).not_to_have_attribute("data-ended", "")
    live_green = colour(page, "#connection")
    assert live_green == dot(page) != colour(page, ".run-meta.muted"), live_green
    dialog = open_cancel(page)
    expect(page.locator("#cancel-question")).to_contain_text(f"It is waiting for {REVIEW}")
    expect(dialog).not_to_contain_text("running")
    no_sideways_scroll(page, "the dialog")
    shot(page, "1-cancel-waiting-review")
    keep(page, dialog, "Keep it waiting")
    assert Run.objects.get(pk=review.pk).status == "paused"

    # Waiting for answers to its questions: the same, in its words.
    page.goto(f"{server.url}/runs/{answers.pk}/")
    expect(page.locator("#clarify-form")).to_be_visible()
    dialog = open_cancel(page)
    expect(page.locator("#cancel-question")).to_contain_text(f"It is waiting for {ANSWERS}")
    shot(page, "2-cancel-waiting-answers")
    keep(page, dialog, "Keep it waiting")
    assert Run.objects.get(pk=answers.pk).status == "paused"

    # At work: it is kept running, and cancelled from the dialog it ends; no longer "Live".
    page.goto(f"{server.url}/runs/{working.pk}/")
    expect(page.locator("#run-status")).to_have_text("working")
    expect(connection).to_have_text("Live")
    dialog = open_cancel(page)
    expect(page.locator("#cancel-question")).to_contain_text("Every agent stops now")
    shot(page, "3-cancel-working")
    keep(page, dialog, "Keep it running")
    open_cancel(page)
    page.locator("#cancel-confirm").click()
    expect(page.locator("#run-status")).to_have_text("cancelled")
    expect(connection).to_have_text("Research cancelled")
    expect(connection).to_have_attribute("data-state", "live")  # the socket is still open
    expect(connection).to_have_attribute("data-ended", "")
    assert colour(page, "#connection") == colour(page, ".run-meta.muted") != live_green
    assert dot(page) != live_green
    connection.scroll_into_view_if_needed()
    shot(page, "4-cancelled")

    # The plan approved, the research ends done while the page watches: it says so.
    page.goto(f"{server.url}/runs/{review.pk}/")
    expect(connection).to_have_text("Live")
    page.get_by_role("button", name="Approve plan").click()
    expect(page.locator("#run-status")).to_have_text("done")
    expect(connection).to_have_text("Research done")
    expect(connection).to_have_attribute("data-ended", "")
    # Opened afresh, as an analyst opens a finished research from the list.
    page.reload()
    expect(connection).to_have_text("Research done")
    expect(connection).to_have_attribute("data-state", "live")
    assert colour(page, "#connection") != live_green
    no_sideways_scroll(page, "a done research")
    connection.scroll_into_view_if_needed()
    shot(page, "5-done")
