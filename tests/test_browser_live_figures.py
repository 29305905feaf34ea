"""What the run page and the runs list show while a research works, in Debian's Chromium
against a real daphne, at 1440x900 and on a phone (390x844): figures that follow the live
state everywhere they show, words that agree with their numbers, and a topic of one long
word that stays on the page.

The server runs no agents (RESEARCH_AGENTS_IN_WEB=false): the test moves each research
through the services, so every figure is the one the test set when it looks.

Screenshots go to SCREENSHOTS (default /tmp/canopy-live-figures) to be looked at.
"""

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from research import services
from research.models import Run
from tests import browsing
from tests.browsing import SIZES, no_sideways_scroll, sized_page
from tests.conftest import start_daphne
from tests.test_browser import browser, log_in  # noqa: F401  (fixtures)

# ruff: noqa: F811  (pytest fixtures imported from tests.test_browser)
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = browsing.screenshots("/tmp/canopy-live-figures")
LONG_WORD = "tidal" + "x" * 675  # 680 characters, no space: a pasted token or address
LINE = 1.45 * 16 * 1.25  # a line of the run page's heading, in pixels (static/canopy.css)


@pytest.fixture(scope="module")
def module_server(django_db_setup, tmp_path_factory):
    """A real daphne whose pool claims nothing: the tests move their researches themselves.
    One for the module: it runs no agent and keeps nothing of a test's rows, which each
    test's flush removes, and a start costs about three seconds (most of a test's setup)."""
    from django.conf import settings

    server = start_daphne(
        settings,
        tmp_path_factory.mktemp("daphne"),
        DJANGO_ALLOW_ASYNC_UNSAFE="",
        RESEARCH_AGENTS_IN_WEB="false",
    )
    yield server
    server.stop()


@pytest.fixture
def server(module_server, transactional_db):
    return module_server


@pytest.fixture(params=list(SIZES))
def page(request, browser: Browser):
    yield from sized_page(browser, request.param)


def shot(page: Page, name: str, *, full_page: bool = False) -> None:
    browsing.shot(page, SCREENSHOTS, name, full_page=full_page)


def working(owner, topic: str, **kwargs) -> Run:
    """A research its agent has claimed: working, its clock running."""
    research = services.run_start(owner=owner, topic=topic, **kwargs)
    assert services.run_claim(run_id=research.pk) is not None
    return research


def boxes(page: Page, *selectors: str) -> list[dict | None]:
    """The boxes of the first element of each selector, read in one go (the page redraws)."""
    return page.evaluate(
        """(selectors) => selectors.map((selector) => {
          const element = document.querySelector(selector);
          return element ? element.getBoundingClientRect().toJSON() : null;
        })""",
        list(selectors),
    )


def within(box: dict, outer: dict) -> bool:
    return box["x"] >= outer["x"] - 1 and box["right"] <= outer["right"] + 1


def test_a_topic_of_one_long_word_stays_on_the_page(page, server, alice):
    """A 680-character word in the topic made the run page scroll sideways on a phone
    (scrollWidth 1099 of 390): the panel's collapsed Topic ran out of the panel. Opened, the
    whole topic showed under its own first words."""
    research = working(alice, f"Explain {LONG_WORD} please")
    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{research.pk}/")
    task = page.locator("#panel details.task-long")
    expect(task).to_be_visible()
    expect(task.locator(".task-start")).to_be_visible()
    expect(task.locator("summary")).to_contain_text("Show the whole topic (")

    no_sideways_scroll(page, "the run page")
    shot(page, "long-topic-title")
    title, panel, start, summary = boxes(
        page, "#run-title", "#panel", "#panel .task-start", "#panel .task-long > summary"
    )
    viewport = {"x": 0, "right": page.viewport_size["width"]}
    assert within(title, viewport), title  # the topic as the page's heading wraps
    assert 3 * LINE < title["height"] <= 4 * LINE + 2, title  # its first four lines
    assert within(start, panel), (start, panel)
    assert within(summary, panel), (summary, panel)
    # For the screenshot, in the page: a live event may load the panel again meanwhile.
    page.evaluate("document.querySelector('#panel details.task-long').scrollIntoView()")
    shot(page, "long-topic-closed")

    # Opened: the whole topic, without its first words above it; the summary closes it again.
    task.locator("summary").click()
    expect(task.locator(".task-text")).to_be_visible()
    expect(task.locator(".task-start")).to_be_hidden()
    expect(task.locator("summary")).to_have_text("Hide the whole topic", use_inner_text=True)
    no_sideways_scroll(page, "the topic opened")
    text, panel = boxes(page, "#panel .task-text", "#panel")
    assert within(text, panel), (text, panel)
    shot(page, "long-topic-open")
    task.locator("summary").click()
    expect(task.locator(".task-text")).to_be_hidden()
    expect(task.locator(".task-start")).to_be_visible()


def test_a_pasted_long_topic_heads_the_page_in_four_lines(page, server, alice):
    """A 2,000-character topic's heading filled a phone's screen and more before the first
    figure: it shows its first four lines, and the agent panel's Topic the whole of it."""
    clause = "of the brief on estuary tides and their bores."
    words = " ".join(f"Clause {n} {clause}" for n in range(36))
    topic = f"Severn bores ({page.size_name}): {words}"[:2000]
    research = working(alice, topic)
    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{research.pk}/")
    title = page.locator("#run-title")
    expect(title).to_have_text(topic)  # whole, for a screen reader and a search in the page
    (box,) = boxes(page, "#run-title")
    assert 3 * LINE < box["height"] <= 4 * LINE + 2, box
    cost = page.locator("#tree-cost")
    expect(cost).to_be_in_viewport()  # the figures show without scrolling
    task = page.locator("#panel details.task-long")
    task.locator("summary").click()
    expect(task.locator(".task-text")).to_have_text(topic)
    no_sideways_scroll(page, "a long topic")
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, "long-topic-words")


def agent(page: Page, run: Run):
    """An agent as the page shows it: its node in a desktop's tree, its row in a phone's list."""
    if page.size_name == "phone":
        return page.locator(f'button.agent-row[data-run-id="{run.pk}"]')
    return page.locator(f'g.node[data-run-id="{run.pk}"]')


def figures(page: Page, run: Run):
    """The agent's steps and cost, on its node or its row."""
    return agent(page, run).locator(".agent-row-figures, .node-figures")


def child_of(parent: Run, name: str, *, max_steps: int = 5) -> Run:
    child = services.subagent_create(
        parent_id=parent.pk,
        launch=services.Launch(
            name=name, reason=f"{name} covers one facet", task=f"{name}: look", max_steps=max_steps
        ),
    )
    assert services.run_claim(run_id=child.pk) is not None
    return child


def spend(run: Run, input_tokens: int, output_tokens: int) -> None:
    services.usage_add(
        run_id=run.pk, input_tokens=input_tokens, output_tokens=output_tokens, latency_ms=5
    )


def fact(page: Page, name: str):
    """One of the panel's facts (Worked, Steps, Cost, Tokens), by the name it shows."""
    return page.locator("#panel .facts > div").filter(has=page.get_by_text(name, exact=True))


def panel_and_header(page: Page) -> dict[str, str]:
    """The header's figures and the panel's, read in one go: the page redraws every frame."""
    return page.evaluate(
        """() => {
          const text = (selector) => document.querySelector(selector).textContent.trim();
          const fact = (name) => [...document.querySelectorAll("#panel .facts > div")]
            .find((div) => div.querySelector("dt").textContent === name)
            .querySelector("dd").textContent.trim();
          return {
            worked: text("#elapsed"), panelWorked: fact("Worked"),
            tokens: text("#tree-tokens"), panelTokens: fact("Tokens"),
            cost: text("#tree-cost"), panelCost: fact("Cost"), panelSteps: fact("Steps"),
          };
        }"""
    )


def test_the_agent_panel_says_the_figures_the_header_and_tree_say(page, server, alice):
    """A root waiting on its sub-agents read "Worked under 1 s" in its panel for minutes while
    the header said 3 min; its tokens and cost stayed at what the panel was loaded with."""
    research = working(alice, f"Kites ({page.size_name}): why do they hover?")
    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{research.pk}/")
    expect(fact(page, "Worked")).to_be_visible()

    # The clock ticks in the panel as in the header, second by second, never another figure.
    expect(page.locator("#elapsed")).to_have_text(re.compile(r"^[3-9] s$"))
    for _ in range(3):
        seen = panel_and_header(page)
        assert seen["panelWorked"] == seen["worked"], seen
        page.wait_for_timeout(700)

    # The panel's own HTML is slow to come again (held here): its figures follow the state.
    page.route(re.compile(r"/runs/\d+/agents/\d+/$"), lambda route: None)
    spend(research, 1234, 567)
    expect(page.locator("#tree-tokens")).to_have_text("1,234 in · 567 out")
    expect(fact(page, "Tokens").locator("dd")).to_have_text("1,234 in · 567 out")
    expect(fact(page, "Cost").locator("dd")).to_have_text("$0.002368")
    expect(figures(page, research)).to_have_text("1 of 10 steps · $0.002368")
    seen = panel_and_header(page)
    assert (seen["panelCost"], seen["panelSteps"]) == ("$0.002368", "1 of 10 steps"), seen
    assert seen["cost"] == "$0.002368", seen

    # A sub-agent spends: the root's cost with its sub-agents' is the header's tree cost.
    child = child_of(research, "history")
    spend(child, 1000, 0)
    expect(page.locator("#tree-cost")).to_have_text("$0.003368")
    expect(fact(page, "Cost").locator("dd")).to_have_text(
        "$0.002368 ($0.003368 with its sub-agents)"
    )
    seen = panel_and_header(page)
    assert seen["panelWorked"] == seen["worked"], seen
    no_sideways_scroll(page, "the panel's figures")
    page.locator("#panel").scroll_into_view_if_needed()
    shot(page, "panel-figures")


def test_the_words_beside_a_figure_agree_with_it(page, server, alice):
    """A node and the panel read "1 of 1 steps", and an ended agent "worked under 1 s with 1
    tool calls": the noun agrees with its number (the budget's, for steps)."""
    research = working(alice, f"Terns ({page.size_name}): how far do they fly?", max_steps=1)
    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{research.pk}/")
    expect(figures(page, research)).to_have_text("0 of 1 step · $0.00")
    expect(fact(page, "Steps").locator("dd")).to_have_text("0 of 1 step")

    spend(research, 100, 20)
    services.step_record(run_id=research.pk, kind="tool", tool="web_search", output="Terns.")
    expect(figures(page, research)).to_have_text("1 of 1 step · $0.000140")
    expect(fact(page, "Steps").locator("dd")).to_have_text("1 of 1 step")
    spend(research, 100, 20)  # the round past the budget, that writes the report
    expect(fact(page, "Steps").locator("dd")).to_have_text("1 of 1 step + report")
    # A node's card has room for fewer words than a row: the steps are cut, never the cost.
    if page.size_name == "phone":
        expect(figures(page, research)).to_have_text("1 of 1 step + report · $0.000280")
    else:
        expect(figures(page, research)).to_have_text(re.compile(r"^1 of 1 step.*… · \$0\.000280$"))

    # Ended: what a screen reader hears of the agent, "with 1 tool call".
    services.run_finish(run_id=research.pk, report="# Terns\n\nThey fly from pole to pole.")
    expect(page.locator("#run-status")).to_have_text("done")
    node = page.locator(f'g.node[data-run-id="{research.pk}"]')
    expect(node).to_have_attribute("aria-label", re.compile(r", worked .+ with 1 tool call, "))
    expect(node).to_have_attribute("aria-label", re.compile(r"1 of 1 step \+ report, "))
    no_sideways_scroll(page, "the ended research")
    agent(page, research).scroll_into_view_if_needed()
    shot(page, "one-step")


def test_the_agents_tab_is_current_once_followed(page, server, alice):
    """After a jump to "Agents", "Report" stayed the current tab (aria-current)."""
    research = working(alice, f"Swifts ({page.size_name}): do they sleep in the air?")
    services.run_finish(run_id=research.pk, report="# Swifts\n\nThey sleep on the wing.")
    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{research.pk}/")
    tabs = page.get_by_role("navigation", name="On this page")
    report, agents = (
        tabs.get_by_role("link", name="Report"),
        tabs.get_by_role("link", name="Agents"),
    )
    expect(report).to_have_attribute("aria-current", "true")
    expect(agents).not_to_have_attribute("aria-current", re.compile("."))

    agents.click()
    expect(agents).to_have_attribute("aria-current", "true")
    expect(report).not_to_have_attribute("aria-current", re.compile("."))
    tabs.scroll_into_view_if_needed()
    shot(page, "tab-agents")
    report.click()
    expect(report).to_have_attribute("aria-current", "true")
    expect(agents).not_to_have_attribute("aria-current", re.compile("."))
    # Back in the browser's history: the tab of where the page is now.
    page.go_back()
    expect(agents).to_have_attribute("aria-current", "true")
    no_sideways_scroll(page, "the tabs")


def test_a_nodes_state_fits_inside_its_card(page, server, alice):
    """ "waiting · for messages" ran into the right border of its node in the tree."""
    research = working(alice, f"Gannets ({page.size_name}): how do they dive?")
    services.run_set_state(run_id=research.pk, state="waiting", detail="for messages")
    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{research.pk}/")
    if page.size_name == "phone":  # the list shows first there; its row says it all
        row = agent(page, research)
        expect(row.locator(".agent-row-doing")).to_have_text("waiting · for messages")
        page.get_by_role("button", name="Tree").click()
    node = page.locator(f'g.node[data-run-id="{research.pk}"]')
    expect(node).to_have_attribute("data-state", "waiting")
    expect(node).to_have_attribute("aria-label", re.compile(r": waiting · for messages, working"))
    # The text's box and the card's, in the node's own units (the tree may be scaled down).
    text, card = page.evaluate(
        """(id) => {
          const node = document.querySelector(`g.node[data-run-id="${id}"]`);
          return [".node-state", ".node-card"].map((part) => {
            const box = node.querySelector(part).getBBox();
            return {x: box.x, right: box.x + box.width};
          });
        }""",
        research.pk,
    )
    assert text["right"] <= card["right"] - 8, (text, card)  # a padding, as on its left
    shown = node.locator(".node-state").text_content()
    assert shown.startswith("waiting · for"), shown
    no_sideways_scroll(page, "the tree")
    node.scroll_into_view_if_needed()
    shot(page, "node-waiting")


def test_a_row_of_the_list_follows_its_research_and_ends_as_a_reload_draws_it(page, server, alice):
    """The Agents column stayed at 1 while the progress line said "2 of 4 agents done", then
    "5 of 5 agents done"; the cost moved only when the row's status did; the row that ended
    read "5 of 5 agents done · took 3 s" where the server, after a reload, draws "took 3 s"."""
    research = working(alice, f"Kestrels ({page.size_name}): how do they hang in the wind?")
    log_in(page, server, "alice")
    line = page.locator(f'tr[data-run-id="{research.pk}"]')
    agents = line.locator("td").nth(2)
    progress = line.locator("[data-progress]")
    one = "1 agent" if page.size_name == "phone" else "1"
    expect(agents).to_have_text(one, use_inner_text=True)
    expect(progress).to_have_text(re.compile(r"^0 of 1 agent done · \d+ s$"))

    children = [child_of(research, name) for name in ("wind", "eyes", "prey")]
    for child in children[:2]:
        services.run_finish(run_id=child.pk, report=f"{child.name}: seen.")
    expect(progress).to_have_text(re.compile(r"^2 of 4 agents done · "))
    four = "4 agents" if page.size_name == "phone" else "4"
    expect(agents).to_have_text(four, use_inner_text=True)
    # Its delete question counts them as the column does (read from the closed box).
    question = line.locator(".confirm-box p")
    expect(question).to_have_text(re.compile(r"^Delete this research, its 4 agents, "))
    no_sideways_scroll(page, "the list while it works")
    line.scroll_into_view_if_needed()
    shot(page, "list-working")

    last = child_of(research, "nest")
    spend(last, 1000, 500)
    # The cost follows the tree's spending while the research's status stays "working".
    expect(line.locator("[data-tree-cost]")).to_have_text("$0.002000")
    for child in (children[2], last):
        services.run_finish(run_id=child.pk, report=f"{child.name}: seen.")
    services.run_finish(run_id=research.pk, report="# Kestrels\n\nThey face the wind.")
    expect(line.locator("[data-status]")).to_have_text("done")
    five = "5 agents" if page.size_name == "phone" else "5"
    expect(agents).to_have_text(five, use_inner_text=True)
    expect(progress).to_have_text(re.compile(r"^took (under 1|\d+) s$"))
    live = line.inner_text()
    line.scroll_into_view_if_needed()
    shot(page, "list-ended-live")

    # The row as the server draws it: word for word the one the script drew.
    asked = question.text_content()
    page.reload()
    expect(progress).to_have_text(re.compile(r"^took "))
    assert line.inner_text() == live
    assert question.text_content() == asked and "its 5 agents," in asked
    assert "$0.002000" in live  # its sub-agent's cost, spent while the list was open
    no_sideways_scroll(page, "the list reloaded")


def test_a_row_whose_agent_was_stopped_says_ended_as_the_run_page_does(page, server, alice):
    """The list counted a cancelled sub-agent as done ("1 of 3 agents done") where the run
    page's header said "1 of 3 agents ended"; its line now comes from the server's one rule.
    The research then ran out of time: the row's badge, the page's and the tab's title say
    it in the server's words (frontend/words.py), with the list's colour for a failure."""
    from research.endings import CANCELLED_BY_PARENT, research_timed_out

    research = working(alice, f"Swifts ({page.size_name}): do they sleep on the wing?")
    wing, sleep = child_of(research, "wing"), child_of(research, "sleep")
    log_in(page, server, "alice")
    line = page.locator(f'tr[data-run-id="{research.pk}"]')
    progress = line.locator("[data-progress]")
    expect(progress).to_have_text(re.compile(r"^0 of 3 agents done · "))

    services.run_finish(run_id=wing.pk, error=CANCELLED_BY_PARENT)
    expect(progress).to_have_text(re.compile(r"^1 of 3 agents ended · "))
    page.reload()  # the first paint says the same
    expect(progress).to_have_text(re.compile(r"^1 of 3 agents ended · "))
    line.scroll_into_view_if_needed()
    shot(page, "list-agent-stopped")

    # The research's page open in another tab, which says the same.
    tab = page.context.new_page()
    tab.goto(f"{server.url}/runs/{research.pk}/")
    expect(tab.locator("#agents-done")).to_have_text("1 of 3 agents ended")

    # Ended while both are open: the scripts draw the ending in the server's words.
    services.run_finish(run_id=sleep.pk, report="sleep: they do, in flight.")
    services.run_finish(run_id=research.pk, error=research_timed_out(600))
    expect(tab.locator("#run-status")).to_have_text("out of time")
    expect(tab).to_have_title(re.compile(r"^Out of time · "))
    expect(tab.locator("#agents-done")).to_have_text("3 of 3 agents ended")
    tab.close()
    badge = line.locator("[data-status]")
    expect(badge).to_have_text("out of time")
    expect(badge).to_have_class("badge status-failed")
    no_sideways_scroll(page, "the list")
    live = line.inner_text()
    page.reload()
    expect(badge).to_have_text("out of time")
    assert line.inner_text() == live


def test_a_plan_cancelled_before_its_review_reads_not_started_not_gaps(page, server, alice):
    """A research cancelled while its plan waited for review drew every item as a "gap",
    as if its report had missed them: it wrote none. Each item reads "not started"."""
    from research.endings import CANCELLED_BY_USER

    research = working(alice, f"Herons, planned then cancelled ({page.size_name})")
    services.plan_write(root_id=research.pk, items=["Nesting", "Feeding"])
    assert services.plan_pause(root_id=research.pk)
    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{research.pk}/")
    expect(page.locator("#plan-review")).to_be_visible()

    services.run_finish(run_id=research.pk, error=CANCELLED_BY_USER)  # as a cancel ends it

    expect(page.locator("#run-status")).to_have_text("cancelled")
    badges = page.locator(".plan-item .plan-status")
    expect(badges).to_have_text(["not started", "not started"])  # live, from the events
    page.reload()
    expect(badges).to_have_text(["not started", "not started"])  # and from the server's plan
    no_sideways_scroll(page, "cancelled plan")
    shot(page, "plan-cancelled", full_page=True)


def test_a_plan_item_whose_agent_was_stopped_says_how_not_failed(page, server, alice):
    """An item whose sub-agent was cancelled, or interrupted by a server stop, read "✗
    failed", as if the research had failed at it. It says how its agent ended; an item whose
    agent failed still reads failed."""
    from research.endings import CANCELLED_BY_USER, TIMED_OUT, WORKER_LOST

    research = working(alice, f"Terns, stopped midway ({page.size_name})")
    items = ["Nesting", "Feeding", "Flight", "Moult"]
    services.plan_write(root_id=research.pk, items=items)
    nest, feed, flight, moult, moult_again = (
        services.subagent_create(
            parent_id=research.pk,
            launch=services.Launch(
                name=f"{item.lower()}{n}", reason="one item", task=item, max_steps=5,
                plan_item=item,
            ),
        )
        for n, item in enumerate([*items, "Moult"])
    )  # fmt: skip
    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{research.pk}/")
    badges = page.locator(".plan-item .plan-status")
    expect(badges).to_have_text(["working", "working", "working", "working"])

    services.run_finish(run_id=nest.pk, error=CANCELLED_BY_USER)
    services.run_finish(run_id=feed.pk, error=WORKER_LOST)
    services.run_finish(run_id=flight.pk, error="llm: the model's endpoint refused the call")
    services.run_finish(run_id=moult.pk, error=CANCELLED_BY_USER)
    services.run_finish(run_id=moult_again.pk, error=TIMED_OUT)  # stopped, not alike
    services.run_finish(run_id=research.pk, error=CANCELLED_BY_USER)

    expect(page.locator("#run-status")).to_have_text("cancelled")
    marks = page.locator(".plan-item .plan-mark")
    words = ["cancelled", "interrupted", "failed", "stopped"]
    expect(badges).to_have_text(words)
    expect(marks).to_have_text(["–", "–", "✗", "–"])
    page.reload()
    expect(badges).to_have_text(words)
    no_sideways_scroll(page, "stopped items")
    page.locator("#plan-card").scroll_into_view_if_needed()
    shot(page, "plan-stopped")


def test_the_messages_tile_counts_the_agents_messages_and_the_analysts_notes_apart(
    page, server, alice
):
    """The Messages tile counted the analyst's notes as messages between agents: it now says
    them apart, live and at a reload's first paint alike."""
    research = working(alice, f"Gannets ({page.size_name}): how do they dive?")
    wind, fish = (child_of(research, name) for name in ("wind", "fish"))
    log_in(page, server, "alice")
    address = f"{server.url}/runs/{research.pk}/"
    page.goto(address)
    tile = page.locator("#message-count")
    expect(tile).to_have_text("0")

    services.message_record(from_run_id=wind.pk, to_run_id=fish.pk, text="They fold at 10 m.")
    expect(tile).to_have_text("1")
    page.locator("#note-text").fill("Prefer primary sources.")
    page.locator("#note-send").click()
    expect(tile).to_have_text("1 · 1 note")
    feed = page.locator("#message-feed .feed-item")
    expect(feed).to_have_count(2)
    expect(feed.nth(1).locator(".feed-meta")).to_contain_text("the analyst → root")
    expect(page.locator("#feed-title")).to_have_text("Messages and your notes")
    no_sideways_scroll(page, "a message and a note")
    page.locator("#message-count").scroll_into_view_if_needed()
    shot(page, "messages-and-notes")

    # The server's first paint says the same before the script draws it.
    drawn = page.request.get(address).text()
    assert 'id="message-count">1 · 1 note</dd>' in drawn


def test_the_list_says_when_a_research_was_started_elsewhere(page, server, alice):
    """A research started through the API with the list open never showed until a reload,
    while the rows already there followed their researches live."""
    log_in(page, server, "alice")
    expect(page.get_by_text("No research yet.")).to_be_visible()
    notice = page.locator("#newer-runs")
    expect(notice).to_be_hidden()

    started = working(alice, f"Ospreys ({page.size_name}): started from the command line")
    expect(notice).to_have_text(
        "1 research was started since this list was drawn. Show the newest", timeout=20_000
    )
    no_sideways_scroll(page, "the notice")
    notice.scroll_into_view_if_needed()
    shot(page, "list-newer")
    notice.get_by_role("link", name="Show the newest").click()
    expect(page.locator(f'tr[data-run-id="{started.pk}"]')).to_be_visible()
    expect(notice).to_be_hidden()


def test_a_cancel_confirmed_as_the_research_ends_says_it_had_ended(page, server, alice):
    """Confirming a cancel just as the research finished answered "Could not cancel the
    research" and offered "Try cancelling again" (the API's 409): it says it had ended."""
    research = working(alice, f"Swifts ({page.size_name}): do they sleep in flight?")
    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{research.pk}/")
    page.locator("#cancel-research").click()
    expect(page.locator("#cancel-dialog")).to_be_visible()

    services.run_finish(run_id=research.pk, report="# Swifts\n\nThey do, in short naps.")
    expect(page.locator("#run-status")).to_have_text("done")
    page.locator("#cancel-confirm").click()

    expect(page.locator("#announcer")).to_contain_text("The research had already ended.")
    expect(page.locator("#announcer")).not_to_contain_text("Could not cancel")
    research.refresh_from_db()
    assert (research.status, research.cancel_requested) == ("done", False)
