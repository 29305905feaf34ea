"""A sub-agent's name and its kind badge in Debian's Chromium, at 1440x900 and on a phone
(390x844): a tester saw "metaclassesresearcher" in the tree, the name run into the badge on
the node's first line, and a longer name would have covered it. The badge now has a line of
its own above the name, which gets the card's whole width (cut with an ellipsis past it,
whole in the node's title and aria-label); the phone's list keeps the two apart too.

The server runs no agents: the test records the research and its sub-agents itself.

Screenshots go to SCREENSHOTS (default /tmp/canopy-tree-nodes) to be looked at.
"""

import re

import pytest
from playwright.sync_api import Page, expect

from research import services
from research.models import Run
from tests import browsing
from tests.browsing import no_sideways_scroll
from tests.test_browser import browser, log_in  # noqa: F401  (fixtures)
from tests.test_browser_live_figures import module_server, page, server  # noqa: F401  (fixtures)

# ruff: noqa: F811  (pytest fixtures imported from tests.test_browser)
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = browsing.screenshots("/tmp/canopy-tree-nodes")
SHORT = "metaclasses"
LONG = "regulatory-landscape-europe-and-asia"
GAP = 6  # pixels, in the node's units, that keep a name visibly apart from its badge

# The name, badge and card of a node (in the node's own units: the tree may be scaled down)
# or of a row of the phone's list (in the page's), read in one go.
PARTS = """([selector, id]) => {
  const agent = document.querySelector(`${selector}[data-run-id="${id}"]`);
  const parts = [".node-name, .agent-row-name", ".node-kind, .agent-row-kind", ".node-card"];
  return parts.map((part) => {
    const element = agent.querySelector(part) || agent; // a row is its own card
    const box = element.getBBox ? element.getBBox() : element.getBoundingClientRect();
    return {left: box.x, right: box.x + box.width, top: box.y, bottom: box.y + box.height,
            text: element.textContent};
  });
}"""


def researcher(parent: Run, name: str, *, tier: str = "") -> Run:
    launch = services.Launch(
        name=name, reason="a facet", task=f"{name}: look", max_steps=5, kind="researcher", tier=tier
    )
    return services.subagent_create(parent_id=parent.pk, launch=launch)


def parts(page: Page, selector: str, run: Run) -> tuple[dict, dict, dict]:
    return tuple(page.evaluate(PARTS, [selector, run.pk]))


def assert_apart(name: dict, kind: dict, box: dict, *, padding: float = 0) -> None:
    """No overlap, whichever way the node or row lays them out (a gap when side by side),
    and both inside the card or row, `padding` from its right border."""
    apart = (
        name["right"] + GAP <= kind["left"]
        or kind["right"] + GAP <= name["left"]
        or name["bottom"] <= kind["top"]
        or kind["bottom"] <= name["top"]
    )
    assert apart, (name, kind)
    for part in (name, kind):
        assert box["left"] <= part["left"], (part, box)
        assert part["right"] <= box["right"] - padding, (part, box)
        assert box["top"] <= part["top"] and part["bottom"] <= box["bottom"], (part, box)


def assert_tree_keeps_names_apart(page: Page, agents: dict[Run, tuple[str, str]]) -> None:
    for run, (shown, badge) in agents.items():
        node = page.locator(f'g.node[data-run-id="{run.pk}"]')
        expect(node.locator(".node-kind")).to_have_text(badge)
        name, kind, card = parts(page, "g.node", run)
        assert_apart(name, kind, card, padding=8)  # a padding, as on its left
        assert re.fullmatch(shown, name["text"]), name["text"]
        # The whole name stays one hover or one screen reader away.
        expect(node).to_have_attribute("aria-label", re.compile(f"^{run.name}, researcher"))
        expect(node.locator("title")).to_have_text(re.compile(f"^{run.name}, researcher"))


def test_a_sub_agents_name_and_kind_never_overlap(page, server, alice):
    research = services.run_start(owner=alice, topic=f"Python ({page.size_name}): metaclasses?")
    short = researcher(research, SHORT)
    long = researcher(research, LONG)
    tiered = researcher(research, LONG[:27], tier="high")
    # A short name whole; a long one cut at the card's border, its start kept.
    agents = {
        short: (f"^{SHORT}$", "researcher"),
        long: (r"^regulatory-land\S*…$", "researcher"),
        tiered: (r"^regulatory-land\S*…$", "researcher · high"),
    }
    log_in(page, server, "alice")
    page.goto(f"{server.url}/runs/{research.pk}/")
    if page.size_name == "phone":  # the list shows first there: whole names, apart from kinds
        for run in agents:
            row = page.locator(f'button.agent-row[data-run-id="{run.pk}"]')
            expect(row.locator(".agent-row-name")).to_have_text(run.name)
            expect(row.locator(".agent-row-kind")).to_have_text(agents[run][1])
            assert_apart(*parts(page, "button.agent-row", run))
        # A long name has the row's width: it broke at every hyphen, four lines deep, beside
        # the figures' column.
        height = {run: parts(page, "button.agent-row", run)[0] for run in (short, long)}
        lines = {run: box["bottom"] - box["top"] for run, box in height.items()}
        assert lines[long] <= 2 * lines[short] + 1, lines
        no_sideways_scroll(page, "the list")
        page.locator(".agent-list").scroll_into_view_if_needed()
        browsing.shot(page, SCREENSHOTS, "list", full_page=False)
        page.get_by_role("button", name="Tree").click()
    node = page.locator(f'g.node[data-run-id="{long.pk}"]')
    expect(node).to_be_visible()
    node.scroll_into_view_if_needed()
    browsing.shot(page, SCREENSHOTS, "tree", full_page=False)  # before the checks: to compare
    assert_tree_keeps_names_apart(page, agents)
    no_sideways_scroll(page, "the tree")
