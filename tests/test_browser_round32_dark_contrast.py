"""Dark mode's contrast, measured in Debian's Chromium against a real daphne at 1440x900 and
on a phone (390x844): each element's computed colour against the background it actually sits
on (the first one up its tree that is not transparent, laid over the ones under it).

An analyst found, with the system in dark mode: white words on the primary buttons' light blue
(2.7:1: "Start research", "Search", "Approve plan", "Ask a follow-up", "Start a research on
it"), "done" in the phone's agent list in dark green on the selected row's dark blue (2.18:1),
and the green "Live" and the plan's ✓ at 3.27:1. Words need 4.5:1 (WCAG AA); the ✓, an icon,
3:1.

Screenshots go to SCREENSHOTS (default /tmp/canopy-round32-dark) to be looked at.
"""

import pytest
from playwright.sync_api import Browser, Page, expect

from agents.llm.scripted import call, reply
from research import services
from research.models import Run
from tests import browsing
from tests.browsing import SIZES, no_sideways_scroll, sized_page
from tests.conftest import demo_on_starter, wait_finished, wait_for
from tests.test_browser import browser, log_in, server  # noqa: F401  (fixtures)

# ruff: noqa: F811  (pytest fixtures imported from tests.test_browser)
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = browsing.screenshots("/tmp/canopy-round32-dark")
TEXT = 4.5

# The contrast of the first element a selector finds: its colour (`fill` for SVG text) over
# the first background up its tree that is not transparent, each translucent one laid over
# the next one down; the page's own canvas (the root's background) at the bottom.
CONTRAST = """
(selector) => {
  const element = document.querySelector(selector);
  if (!element) return null;
  const rgba = (text) => {
    const parts = text.match(/[\\d.]+/g).map(Number);
    return [parts[0], parts[1], parts[2], parts.length > 3 ? parts[3] : 1];
  };
  const over = (top, under) => [0, 1, 2].map((i) => top[i] * top[3] + under[i] * (1 - top[3]));
  const luminance = (colour) => {
    const [r, g, b] = colour.map((value) => {
      const c = value / 255;
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const layers = [];
  for (let node = element; node; node = node.parentElement) {
    const colour = rgba(getComputedStyle(node).backgroundColor);
    if (colour[3] > 0) layers.push(colour);
    if (colour[3] >= 1) break;
  }
  let background = [255, 255, 255];
  for (const layer of layers.reverse()) background = over(layer, background);
  const style = getComputedStyle(element);
  const own = rgba(element instanceof SVGElement ? style.fill : style.color);
  const colour = over(own, background);
  const [light, dark] = [luminance(colour), luminance(background)].sort((a, b) => b - a);
  return {
    ratio: Math.round(((light + 0.05) / (dark + 0.05)) * 100) / 100,
    colour: colour.map(Math.round), background: background.map(Math.round),
    text: element.textContent.trim().slice(0, 40),
  };
}
"""


@pytest.fixture(params=list(SIZES))
def page(request, browser: Browser):
    for page in sized_page(browser, request.param):
        page.emulate_media(color_scheme="dark")
        page.too_faint = []
        yield page


def shot(page: Page, name: str, *, full_page: bool = False) -> None:
    browsing.shot(page, SCREENSHOTS, name, full_page=full_page)


def contrast(page: Page, selector: str, least: float = TEXT) -> None:
    """Measure the element's contrast; one under `least` is listed in `page.too_faint`, which
    the test asserts empty at its end (so a failure names every faint element at once)."""
    expect(page.locator(selector).first).to_be_visible()
    measured = page.evaluate(CONTRAST, selector)
    if measured["ratio"] < least:
        page.too_faint.append(f"{page.url} {selector} (at least {least}): {measured}")


def in_dark(page: Page) -> None:
    assert page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
    background = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
    assert background == "rgb(15, 20, 27)", background  # canopy-dark.css's --bg


def show_the_list(page: Page) -> None:
    """The agents as a list: the phone's default; a desktop's switch is hidden, so pressed
    from the page's script."""
    if page.size_name != "phone":
        page.evaluate("document.getElementById('view-list').click()")
    expect(page.locator(".agent-row").first).to_be_visible()


def test_dark_mode_words_and_marks_stand_out_from_their_backgrounds(
    page, server, scripted_llm, alice
):
    done = demo_on_starter(
        alice, f"How do Python's context managers and exceptions interact? ({page.size_name})"
    )
    waiting_topic = f"Dippers ({page.size_name}): how do they feed underwater?"
    scripted_llm.script(
        waiting_topic,
        call("write_plan", items=["Dives", "Prey"]),
        reply("# Dippers\n\nThey walk along the bottom of fast streams."),
    )
    waiting = services.run_start(owner=alice, topic=waiting_topic, review_plan=True)
    done = wait_finished(done, timeout=40)
    assert done.status == "done", done.error
    wait_for(lambda: Run.objects.get(pk=waiting.pk).status == "paused", message="no review")

    # The runs list: the start form's and the search's primary buttons.
    log_in(page, server, "alice")
    in_dark(page)
    contrast(page, "#main button.button-primary[type=submit]")  # Start research
    contrast(page, "button.button-primary.button-small")  # Search
    no_sideways_scroll(page, "the runs list")
    shot(page, "1-runs")

    # A research waiting for its plan's review: Approve plan, and the live socket's "Live".
    page.goto(f"{server.url}/runs/{waiting.pk}/")
    expect(page.locator("#plan-review")).to_be_visible()
    contrast(page, "#plan-approve")
    expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    expect(page.locator("#connection")).to_have_text("Live")
    contrast(page, "#connection")
    page.locator("#plan-review").scroll_into_view_if_needed()
    shot(page, "2-review")
    page.locator("#connection").scroll_into_view_if_needed()
    shot(page, "3-live")
    # Its cancel confirmation: the solid red "Yes, cancel the research".
    page.locator("#cancel-research").click()
    expect(page.locator("#cancel-dialog")).to_be_visible()
    contrast(page, "#cancel-confirm")
    shot(page, "4-cancel-dialog")
    page.keyboard.press("Escape")
    expect(page.locator("#cancel-dialog")).to_be_hidden()

    # The finished research: its plan's ✓, its follow-up's button, its agents' "done" in the
    # list, the selected row's (the root's) and the others'.
    page.goto(f"{server.url}/runs/{done.pk}/")
    covered = ".plan-item[data-status=covered] .plan-mark"
    expect(page.locator(covered).first).to_have_text("✓")
    contrast(page, covered)  # a glyph in a line of words: 4.5:1 as they
    contrast(page, "#followup-start")
    page.locator("#followup-start").scroll_into_view_if_needed()
    shot(page, "5-follow-up")
    page.locator("#plan-card").scroll_into_view_if_needed()
    shot(page, "6-plan")
    show_the_list(page)
    rows = page.locator(".agent-row")
    expect(rows).to_have_count(Run.objects.filter(root_id=done.pk).count())
    expect(page.locator('.agent-row[aria-pressed="true"] .agent-row-doing')).to_have_text("done")
    contrast(page, '.agent-row[aria-pressed="true"] .agent-row-doing')
    contrast(page, '.agent-row[aria-pressed="false"] .agent-row-doing')
    contrast(page, "#connection")
    # The root's transcript in its panel: its model steps' "model".
    transcript = page.locator("#panel details").filter(has_text="Transcript").first
    transcript.locator("summary").first.click()
    contrast(page, "#panel .step-model .step-kind")
    no_sideways_scroll(page, "the finished research")
    page.locator("#agent-list").scroll_into_view_if_needed()
    shot(page, "7-agent-list")

    # A knowledge base's page: Start a research on it.
    page.goto(f"{server.url}/kb/{done.dataset_id}/")
    start = page.get_by_role("link", name="Start a research on it")
    expect(start).to_be_visible()
    contrast(page, ".kb-head a.button-primary")
    no_sideways_scroll(page, "the knowledge base")
    shot(page, "8-knowledge-base")
    assert page.too_faint == [], "\n".join(page.too_faint)
