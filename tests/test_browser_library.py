"""The research library in Debian's Chromium against a real daphne, at a desktop's and a
phone's size: the start form, search and filters, how each research reads, delete with its
confirmation, run again, and a cancelled research turning grey without a reload.

Screenshots go to SCREENSHOTS (default /tmp/canopy-library) to be looked at.
"""

import re
from datetime import timedelta

import pytest
from playwright.sync_api import Browser, Page, expect

from agents.llm.scripted import call, reply
from research import endings, services
from research.models import Run, Status
from tests import browsing
from tests.browsing import SIZES, sized_page
from tests.test_browser import (  # noqa: F401  (fixtures)
    browser,
    log_in,
    server,
    start_research,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = browsing.screenshots("/tmp/canopy-library")
TIMEOUT_MS = 15_000


@pytest.fixture(params=list(SIZES))
def page(request, browser: Browser):  # noqa: F811
    yield from sized_page(browser, request.param)


def shot(page: Page, name: str, *, full_page: bool = True) -> None:
    browsing.shot(page, SCREENSHOTS, name, full_page=full_page)


def _ended(run: Run, **fields) -> Run:
    services.run_finish(
        run_id=run.pk, report=fields.pop("report", ""), error=fields.pop("error", "")
    )
    start = run.created_at
    Run.objects.filter(pk=run.pk).update(started_at=start, **fields)
    return run


@pytest.fixture
def library(alice, settings):
    settings.RESEARCH_MAX_WORKING_ROOTS = 10
    start = services.run_start
    done = _ended(
        start(owner=alice, topic="Where did the lynx come back?"),
        report="The lynx returned to the Harz mountains in 2000.",
    )
    Run.objects.filter(pk=done.pk).update(finished_at=done.created_at + timedelta(seconds=125))
    cancelled = start(owner=alice, topic="Otters and eels in the Rhine")
    _ended(cancelled, error=endings.CANCELLED_BY_USER)
    Run.objects.filter(pk=cancelled.pk).update(
        finished_at=cancelled.created_at + timedelta(seconds=3)
    )
    failed = start(owner=alice, topic="Salmon runs in the Loire")
    _ended(failed, error="llm: 500 from api.example.com after 3 tries")
    waiting = start(owner=alice, topic="Which beavers build the largest dams?", review_plan=True)
    Run.objects.filter(pk=waiting.pk).update(status=Status.PAUSED, started_at=waiting.created_at)
    return {"done": done, "cancelled": cancelled, "failed": failed, "waiting": waiting}


def row(page: Page, run: Run):
    return page.locator(f'tr[data-run-id="{run.pk}"]')


def test_the_library_reads_searches_deletes_and_runs_again(page, server, alice, library):  # noqa: F811
    log_in(page, server, "alice")
    shot(page, "list")

    review = row(page, library["waiting"]).locator("[data-status]")
    expect(review).to_have_text("needs your review")
    expect(row(page, library["done"])).to_contain_text("took 2 min 05 s")
    cancelled = row(page, library["cancelled"]).locator("[data-status]")
    expect(cancelled).to_have_text("cancelled")
    expect(row(page, library["cancelled"])).to_contain_text("took 3 s")
    grey = cancelled.evaluate("element => getComputedStyle(element).backgroundColor")
    red = row(page, library["failed"]).locator("[data-status]")
    expect(red).to_have_text("failed")
    assert grey == "rgb(238, 241, 245)", grey
    assert red.evaluate("element => getComputedStyle(element).backgroundColor") != grey

    # The review option: a box the size of a box, its label beside it.
    box = page.locator("#id_review_plan").bounding_box()
    label = page.get_by_text("Review the plan first", exact=True).bounding_box()
    assert box["width"] < 30 and box["height"] < 30, box
    assert label["x"] > box["x"] + box["width"] and abs(label["y"] - box["y"]) < 12

    # Search by a word of a report, then by status.
    page.get_by_role("searchbox", name="Search").fill("Harz")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.locator("tr[data-run-id]")).to_have_count(1)
    expect(row(page, library["done"])).to_be_visible()
    page.get_by_role("link", name="Clear").click()
    page.get_by_label("Status").select_option("cancelled")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.locator("tr[data-run-id]")).to_have_count(1)
    expect(row(page, library["cancelled"])).to_be_visible()
    shot(page, "filtered")
    page.get_by_role("link", name="Clear").click()

    # Delete asks first, in place.
    failed = row(page, library["failed"])
    failed.get_by_text("Delete", exact=True).click()
    confirm = failed.locator(".confirm-box")
    expect(confirm).to_be_visible()
    expect(confirm).to_contain_text("Delete this research, its 1 agent, their events and sources?")
    confirm.scroll_into_view_if_needed()
    inside = confirm.bounding_box()
    assert inside["x"] >= 0 and inside["x"] + inside["width"] <= page.viewport_size["width"]
    shot(page, "confirm-delete", full_page=False)
    confirm.get_by_role("button", name="Delete for good").click()
    expect(page.get_by_text("Deleted the research “Salmon runs in the Loire”.")).to_be_visible()
    expect(row(page, library["failed"])).to_have_count(0)
    assert not Run.objects.filter(pk=library["failed"].pk).exists()

    # Run again: a new research with the same settings.
    row(page, library["done"]).get_by_role("button", name=re.compile("^Run again")).click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    new = Run.objects.get(pk=int(re.search(r"/runs/(\d+)/$", page.url).group(1)))
    assert new.pk != library["done"].pk and new.topic == library["done"].topic


def test_the_form_says_what_is_wrong_beside_the_field(page, server, alice):  # noqa: F811
    log_in(page, server, "alice")

    page.get_by_label("Model").select_option("demo")
    page.get_by_label("Knowledge base").select_option("")
    page.get_by_role("button", name="Start research").click()

    expect(page.locator("#id_topic-error")).to_have_text("The question must not be empty.")
    expect(page.locator("#id_dataset-error")).to_contain_text(
        "The offline demo model answers from a knowledge base, not the web"
    )
    shot(page, "form-errors")
    assert not Run.objects.exists()


def test_a_research_cancelled_while_the_list_is_open_turns_grey(
    page,
    server,  # noqa: F811
    alice,
    scripted_llm,
):
    topic = "Herons on one leg: why?"
    scripted_llm.script(
        topic,
        call("spawn_subagent", name="slow", reason="a facet", task="SLOW-TASK: the evidence"),
        call("wait_subagents"),
        reply("never"),
    )
    scripted_llm.script("SLOW-TASK", call("read_messages", wait_seconds=60), reply("never"))
    log_in(page, server, "alice")
    root_id = start_research(page, topic)
    page.goto(f"{server.url}/")
    listed = page.locator(f'tr[data-run-id="{root_id}"]')
    expect(listed.locator("[data-status]")).to_have_text("working")
    expect(listed.locator("[data-progress]")).to_contain_text(re.compile(r"agents? done · \d+ s"))

    services.run_cancel(run=Run.objects.get(pk=root_id))

    expect(listed.locator("[data-status]")).to_have_text("cancelled", timeout=TIMEOUT_MS)
    expect(listed.locator("[data-status]")).to_have_class(re.compile("status-cancelled"))
    expect(listed.locator("[data-progress]")).to_contain_text("took ")
    shot(page, "cancelled-live", full_page=False)


def test_a_star_marks_a_research_and_starred_only_lists_it(page, server, alice, library):  # noqa: F811
    log_in(page, server, "alice")
    lynx = row(page, library["done"])
    star = lynx.get_by_role("button", name=re.compile("^Star: Where did the lynx"))
    expect(star).to_have_attribute("aria-pressed", "false")

    star.click()
    star = row(page, library["done"]).get_by_role("button", name=re.compile("^Star: "))
    expect(star).to_have_attribute("aria-pressed", "true")
    expect(star).to_have_text("★")
    # The star sits before its topic, on the topic's line, on a phone too.
    topic = row(page, library["done"]).get_by_role("link", name="Where did the lynx come back?")
    assert abs(star.bounding_box()["y"] - topic.bounding_box()["y"]) < 12
    assert page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"]

    page.get_by_label("Starred only").check()
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.locator("tr[data-run-id]")).to_have_count(1)
    expect(row(page, library["done"])).to_be_visible()
    shot(page, "starred")
    assert Run.objects.get(pk=library["done"].pk).starred is True
