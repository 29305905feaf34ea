"""Clarify before starting (issue 27) in Debian's Chromium against a real daphne, at a
desktop's and a phone's size: the form's option (on by default), the lead's questions waiting
on the page, the analyst's answers reaching the lead's task (the scripted model's request
log), and a skip that starts the research at once.

Screenshots go to SCREENSHOTS (default /tmp/shots-h-c) to be looked at.
"""

import pytest
from playwright.sync_api import Browser, Page, expect

from agents.llm.scripted import call, reply
from research.models import Run
from tests import browsing
from tests.browsing import SIZES, no_sideways_scroll, sized_page
from tests.conftest import wait_for
from tests.test_browser import (  # noqa: F401  (fixtures)
    browser,
    log_in,
    server,
    start_research,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = browsing.screenshots("/tmp/canopy-clarify")
QUESTIONS = [
    "Which kingfishers: the common kingfisher of Europe, or all of its family?",
    "Who is the report for, and what will they use it for?",
    "Is there a period, place or kind of source to focus on?",
]


@pytest.fixture(params=list(SIZES))
def page(request, browser: Browser):  # noqa: F811
    yield from sized_page(browser, request.param)


def shot(page: Page, name: str, *, full_page: bool = False) -> None:
    browsing.shot(page, SCREENSHOTS, name, full_page=full_page)


def asking(scripted_llm, topic: str) -> None:
    scripted_llm.script(
        topic, call("ask_clarifying_questions", questions=QUESTIONS), reply(f"{topic}: report.")
    )


def test_a_short_topic_gets_questions_the_answers_reach_the_task_and_a_skip_starts_at_once(
    page,
    server,  # noqa: F811
    scripted_llm,
    alice,
):
    topic, skipped = "Kingfishers", "Herons"
    asking(scripted_llm, topic)
    asking(scripted_llm, skipped)
    log_in(page, server, "alice")
    expect(page.get_by_label("Clarify before starting")).to_be_checked()
    root_id = start_research(page, topic)

    card = page.locator("#clarify-card")
    expect(card).to_be_visible()
    expect(page.locator("#run-status")).to_have_text("needs your answers")
    expect(page.locator("#agent-count")).to_contain_text("waiting for you")
    expect(card.get_by_role("status")).to_contain_text("Waiting for you.")
    expect(page.locator("#panel .alert-waiting")).to_contain_text("answer or skip the lead's")
    for number, question in enumerate(QUESTIONS, start=1):
        expect(page.get_by_label(f"{number}. {question}")).to_be_visible()
    no_sideways_scroll(page)
    card.scroll_into_view_if_needed()
    shot(page, "clarify-questions")
    assert len(scripted_llm.requests_for(topic)) == 1  # nothing runs while it waits

    page.get_by_label(f"1. {QUESTIONS[0]}").fill("The common kingfisher")
    page.get_by_label(f"3. {QUESTIONS[2]}").fill("Rivers of Britain, since 2000")
    page.get_by_role("button", name="Answer and start").click()

    answers = page.locator("#clarify-answers")
    expect(answers).to_be_visible()
    expect(page.locator("#clarify-form")).to_be_hidden()
    expect(answers.locator("dd")).to_have_text(
        ["The common kingfisher", "(not answered)", "Rivers of Britain, since 2000"]
    )
    expect(page.locator("#run-status")).to_have_text("done")
    task = wait_for(lambda: scripted_llm.requests_for(topic)[1:])[0]["messages"][1]["content"]
    assert f"{QUESTIONS[0]}\n  Answer: The common kingfisher" in task
    assert f"{QUESTIONS[2]}\n  Answer: Rivers of Britain, since 2000" in task
    assert QUESTIONS[1] not in task  # a question left blank is not in the task

    page.reload()  # the answers stay on the page once it ended
    expect(answers.locator("dt")).to_have_text(QUESTIONS)
    no_sideways_scroll(page)
    shot(page, "clarify-answered", full_page=True)
    assert Run.objects.get(pk=root_id).report.startswith(f"{topic}: report.")

    # Skipping starts the research at once, from the topic as written.
    page.goto(f"{server.url}/")
    start_research(page, skipped)
    expect(page.locator("#clarify-form")).to_be_visible()
    page.get_by_role("button", name="Skip and start").click()
    expect(page.locator("#clarify-skipped")).to_be_visible()
    expect(page.locator("#clarify-form")).to_be_hidden()
    expect(answers.locator("dd")).to_have_text(["(skipped)"] * 3)
    expect(page.locator("#run-status")).to_have_text("done")
    task = wait_for(lambda: scripted_llm.requests_for(skipped)[1:])[0]["messages"][1]["content"]
    assert task == skipped
    shot(page, "clarify-skipped")
