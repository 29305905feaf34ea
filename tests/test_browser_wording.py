"""The words an analyst reads, in Debian's Chromium against a real daphne, at a desktop's and a
phone's size: one research that first asks questions, then waits for its plan's review, then
ends, read on its page and in the list; and the API's docs with their way back to the app.

- A paused research says what it waits for ("needs your answers", "needs your review") in the
  badge the server draws and the one the script draws after it, in its tree and its panel,
  never "paused".
- The header says whose step budget it is (the root agent's: sub-agents get their own), the
  knowledge base by that name, and "just now" rather than "0 minutes ago".
- An empty note is refused in a sentence naming the note.
- The exports are the README's: Markdown, PDF, Word, JSON.
- The list reads "just now" too, and "1 agent" on a phone, where no column heading shows.

Screenshots go to SCREENSHOTS (default /tmp/wordshots) to be looked at.
"""

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from agents.llm.scripted import call, reply
from research.models import Dataset, Run
from tests import browsing
from tests.browsing import SIZES, no_sideways_scroll, sized_page
from tests.test_browser import (  # noqa: F401  (fixtures)
    browser,
    log_in,
    server,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = browsing.screenshots("/tmp/wordshots")
QUESTIONS = ["Which dippers: the white-throated dipper, or the whole family?"]
# Every text the run page's status badge shows, from the one the server drew: a badge that
# changes its words when the script runs is recorded twice.
BADGE_LOG = """
window.__badges = [];
new MutationObserver(() => {
  const badge = document.getElementById("run-status");
  const seen = window.__badges;
  if (badge && badge.textContent !== seen[seen.length - 1]) seen.push(badge.textContent);
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


@pytest.fixture(params=list(SIZES))
def page(request, browser: Browser):  # noqa: F811
    yield from sized_page(browser, request.param, init_scripts=(BADGE_LOG,))


def shot(page: Page, name: str, *, full_page: bool = False) -> None:
    browsing.shot(page, SCREENSHOTS, name, full_page=full_page)


def agent_doing(page: Page):
    """What the root does, as its node (a desktop's tree) or its row (a phone's list) says."""
    if page.size_name == "phone":
        return page.locator(".agent-row .agent-row-doing").first
    return page.locator("g.node .node-state").first


def badges(page: Page) -> list[str]:
    return page.evaluate("window.__badges")


def test_a_paused_research_says_what_it_waits_for_in_the_analysts_words(
    page,
    server,  # noqa: F811
    scripted_llm,
    alice,
):
    topic = f"Dippers ({page.size_name}): how do they feed underwater?"
    Dataset.objects.create(owner=alice, name="Birds")
    scripted_llm.script(
        topic,
        call("ask_clarifying_questions", questions=QUESTIONS),
        call("write_plan", items=["Dives", "Prey"]),
        reply("# Dippers\n\nThey walk along the bottom of fast streams."),
    )
    log_in(page, server, "alice")

    # The start form names the knowledge base as the pages do, and whose budget it is.
    expect(page.locator("#id_max_steps_helptext")).to_have_text(
        "The root agent's model rounds, from 1 to 40; each sub-agent gets its own."
    )
    page.get_by_label("What should Canopy research?").fill(topic)
    page.get_by_label("Step budget").fill("8")
    page.get_by_label("Knowledge base").select_option(label="Birds")
    page.get_by_label("Review the plan first").check()
    page.get_by_role("button", name="Start research").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    run_url = page.url

    # Its questions first: the same words in the badge, the tree and the panel, from the badge
    # the server draws on (the page drawn again while it waits) to the script's.
    status = page.locator("#run-status")
    expect(status).to_have_text("needs your answers")
    assert not {"paused", "waiting for you"} & set(badges(page)), badges(page)
    page.reload()
    expect(page.locator("#clarify-form")).to_be_visible()
    expect(status).to_have_text("needs your answers")
    assert badges(page) == ["needs your answers"]
    expect(agent_doing(page)).to_have_text("needs your answers")
    expect(page.locator('#panel [data-live="badges"]')).to_have_text("needs your answers")
    # Its clock stopped while it waits, said as the agents' tile says it: never "paused".
    expect(page.locator("#elapsed")).to_contain_text(" · waiting for you")
    expect(page.locator("#panel")).to_contain_text(" · waiting for you")
    expect(page.locator("body")).not_to_contain_text("paused")
    meta = page.locator(".run-meta")
    expect(meta).to_have_text(
        "Model scripted · step budget 8 for the root agent · knowledge base Birds"
        " · started just now"
    )

    # An empty note is refused in words naming the note.
    page.get_by_role("button", name="Send note").click()
    expect(page.locator("#note-error")).to_have_text("The note must not be empty.")
    no_sideways_scroll(page, "questions")
    shot(page, "1-questions", full_page=True)

    # Then its plan, and never "paused" on the way.
    page.get_by_role("button", name="Skip and start").click()
    expect(page.locator("#plan-review")).to_be_visible()
    expect(status).to_have_text("needs your review")
    expect(agent_doing(page)).to_have_text("needs your review")
    expect(page.locator('#panel [data-live="badges"]')).to_have_text("needs your review")
    expect(page.locator("#elapsed")).to_contain_text(" · waiting for you")
    expect(page.locator("body")).not_to_contain_text("paused")
    seen = badges(page)
    assert seen[0] == "needs your answers" and seen[-1] == "needs your review", seen
    assert not {"paused", "waiting for you"} & set(seen), seen
    shot(page, "2-review", full_page=True)

    # The list says the same, started just now; on a phone the agents' count says what it counts.
    page.get_by_role("link", name="All research").click()
    row = page.locator(f'tr[data-run-id="{run_url.rstrip("/").rsplit("/", 1)[1]}"]')
    expect(row.locator("[data-status]")).to_have_text("needs your review")
    expect(row.locator("time")).to_have_text("just now")
    agents = row.locator("td").nth(2)
    if page.size_name == "phone":
        expect(agents).to_have_text("1 agent")
    else:
        expect(agents).to_have_text(re.compile(r"^1\b"))
    no_sideways_scroll(page, "list")
    row.scroll_into_view_if_needed()
    shot(page, "3-list")

    # The page drawn again by the server while the plan waits: the same badge from the start.
    page.goto(run_url)
    expect(page.locator("#plan-review")).to_be_visible()
    assert badges(page) == ["needs your review"]
    page.get_by_role("button", name="Approve plan").click()
    expect(status).to_have_text("done")

    # The exports, in the README's order; Word is a .docx (a zip).
    exports = page.locator("#exports a:visible")
    expect(exports).to_have_text(["Markdown", "PDF", "Word", "JSON"])
    word = page.locator("#exports").get_by_role("link", name="Word")
    expect(word).to_have_attribute("href", re.compile(r"\?format=docx$"))
    answer = page.request.get(f"{server.url}{word.get_attribute('href')}")
    assert answer.ok and answer.body()[:2] == b"PK"
    no_sideways_scroll(page, "done")
    page.locator("#exports").scroll_into_view_if_needed()
    shot(page, "4-done")
    assert Run.objects.get(pk=int(run_url.rstrip("/").rsplit("/", 1)[1])).status == "done"


def test_the_api_docs_lead_back_to_the_research_list(page, server, alice):  # noqa: F811
    log_in(page, server, "alice")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="API").click()
    page.wait_for_url(re.compile(r"/v1/docs$"))
    expect(page.locator(".swagger-ui .info .title").first).to_be_visible()
    back = page.get_by_role("navigation", name="Canopy").get_by_role("link", name="All research")
    expect(back).to_be_visible()
    assert back.bounding_box()["y"] < 60  # at the top, before the explorer
    no_sideways_scroll(page, "docs")
    shot(page, "5-api-docs")

    back.click()
    expect(page.get_by_role("heading", name="Start a research")).to_be_visible()


def test_a_transcript_says_what_the_model_called_and_wrote_in_words(
    page,
    server,  # noqa: F811
    scripted_llm,
    alice,
):
    """The agent panel's transcript read `called query {"question": "…"}` and "# Research …":
    a model turn's line says its calls in words, and its text without Markdown's marks."""
    from research import services
    from tests.conftest import wait_finished

    topic = f"Tides in words ({page.size_name})"
    scripted_llm.script(
        topic,
        call("web_search", query="spring and neap tides"),
        reply("# Tides\n\n## Findings\n\nThe moon pulls the sea."),
    )
    root = wait_finished(services.run_start(owner=alice, topic=topic))

    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{root.pk}/?agent={root.pk}")
    transcript = page.locator("#panel details").filter(has_text="Transcript").first
    transcript.locator("summary").first.click()
    lines = transcript.locator(".step-model > details > summary")
    expect(lines).to_have_text(
        [
            "model called web_search spring and neap tides",
            "model Tides Findings The moon pulls the sea.",
        ]
    )
    expect(transcript).not_to_contain_text('{"query"')
    no_sideways_scroll(page, "the transcript")
    shot(page, "transcript", full_page=True)
