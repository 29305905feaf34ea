"""The run page as an analyst sees it, at 1440x900 and on a phone (390x844), in Debian's
Chromium against a real daphne, the agent pool and the scripted LLM over HTTP.

One research per flow and size: a reviewed plan that leads to a report with sections, a
knowledge-base quote, a web source and a flagged URL; a research cancelled while a verifier
holds a long draft; and an item the analyst adds in review, researched by the demo model.
Through every flow, after every render of the page, its figures must agree with its tree
and agents list (AGREEMENT_LOG). Screenshots of each moment go to the test's tmp_path (and
CANOPY_SHOTS, when set, for a person to look at).
"""

import os
import re
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from agents.llm.scripted import call, reply
from research.models import Dataset, Event, Run
from research.services.datasets import document_add
from tests.conftest import wait_for
from tests.test_browser import (  # noqa: F401  (fixtures)
    browser,
    gated,
    gates,
    log_in,
    server,
)

# ruff: noqa: F811  (pytest fixtures imported from tests.test_browser)
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SIZES = {"desktop": (1440, 900), "phone": (390, 844)}
QUOTE = "Dippers walk along the bottom of fast streams, gripping stones with their feet"
PASSAGE = f"Dippers and their dives\n\n{QUOTE}, and turn over pebbles to find larvae."
CONNECTION_LOG = """
window.__connection = [];
new MutationObserver(() => {
  const badge = document.getElementById("connection");
  if (badge) window.__connection.push(badge.textContent);
}).observe(document, {subtree: true, childList: true, characterData: true});
"""

# After every change of the page (one render of the state, once per frame), the header's
# figures must tell what the tree and the agents list show (how many agents, how many work,
# how many ended), the panel's status the selected agent's, and a plan item's status its
# agents'. A disagreement is recorded with what it read.
AGREEMENT_LOG = """
window.__agreement = {checks: 0, problems: []};
const agreementCheck = () => {
  const count = document.getElementById("agent-count");
  const done = document.getElementById("agents-done");
  const nodes = [...document.querySelectorAll("g.node[data-run-id]")];
  const rows = [...document.querySelectorAll("button.agent-row[data-run-id]")];
  const agents = rows.length ? rows : nodes;
  if (!count || !done || !agents.length) return;
  const ended = agents.filter((a) => a.dataset.ending).length;
  const paused = agents.filter((a) => a.dataset.status === "paused").length;
  const working = agents.length - ended - paused;
  const progress = done.textContent.match(/^(\\d+) of (\\d+) agents? (done|ended)$/);
  const tally = count.textContent.match(/^(\\d+)(?: · (\\d+) working| · waiting for you)?$/);
  const seen = `${count.textContent} | ${done.textContent} | ${agents.length} agents,` +
    ` ${working} working, ${ended} ended`;
  const problems = [];
  if (!progress || +progress[1] !== ended || +progress[2] !== agents.length) {
    problems.push("progress");
  }
  if (!tally || +tally[1] !== agents.length || (tally[2] !== undefined && +tally[2] !== working))
    problems.push("agents tile");
  if (nodes.length && rows.length && nodes.length !== rows.length) problems.push("tree and list");
  const named = (name) => agents.find((a) =>
    (a.querySelector(".node-name, .agent-row-name") || {}).textContent === name);
  for (const row of document.querySelectorAll("#plan-items .plan-item[data-status]")) {
    const names = ((row.querySelector(".plan-agents") || {}).textContent || "")
      .replace(/^\\s*by /, "").split(",").map((name) => name.trim()).filter(Boolean);
    const runs = names.filter((name) => name !== "lead").map(named).filter(Boolean);
    if (!runs.length) continue;
    const status = row.dataset.status;
    if (status === "working" && !runs.some((a) => !a.dataset.ending)) problems.push("plan working");
    if (status === "covered" && !runs.some((a) => a.dataset.ending === "done"))
      problems.push("plan covered");
    const working = runs.some((a) => !a.dataset.ending && a.dataset.status !== "paused");
    if (status !== "working" && working) problems.push(`plan ${status} while ${names} works`);
  }
  const live = document.querySelector('#panel [data-live="badges"][data-status]');
  if (live) {
    const shown = agents.find((a) => a.dataset.runId === live.dataset.runId);
    if (shown && (shown.dataset.status !== live.dataset.status ||
                  (shown.dataset.ending || "") !== (live.dataset.ending || ""))) {
      problems.push(`panel ${live.dataset.status}/${live.dataset.ending} vs ` +
        `${shown.dataset.status}/${shown.dataset.ending}`);
    }
  }
  window.__agreement.checks += 1;
  if (problems.length) window.__agreement.problems.push(`${problems.join(", ")}: ${seen}`);
};
new MutationObserver(agreementCheck).observe(document, {
  subtree: true, childList: true, characterData: true, attributes: true,
});
"""


def assert_figures_agreed(page: Page) -> None:
    agreement = page.evaluate("window.__agreement")
    assert agreement["checks"] > 10, agreement
    assert agreement["problems"] == [], agreement["problems"][:5]


@pytest.fixture(params=list(SIZES))
def sized(request, browser):  # noqa: F811
    width, height = SIZES[request.param]
    context = browser.new_context(
        viewport={"width": width, "height": height}, has_touch=request.param == "phone"
    )
    context.add_init_script(CONNECTION_LOG)
    context.add_init_script(AGREEMENT_LOG)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.size_name = request.param
    yield page
    context.close()
    assert errors == [], "the page raised JavaScript errors"


def shot(page: Page, tmp_path: Path, moment: str) -> None:
    name = f"{page.size_name}-{moment}.png"
    page.screenshot(path=tmp_path / name, full_page=moment.endswith("full"))
    if folder := os.environ.get("CANOPY_SHOTS"):
        page.screenshot(path=Path(folder) / name, full_page=moment.endswith("full"))


def no_sideways_scroll(page: Page, moment: str) -> None:
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"{moment}: the page scrolls sideways ({widths})"


def node(page: Page, name: str):
    return page.locator("g.node").filter(
        has=page.locator(".node-name", has_text=re.compile(f"^{name}$"))
    )


def agent(page: Page, name: str):
    """The agent as the analyst finds it: its node (tree view) or its row (the phone's list)."""
    if page.size_name == "phone":
        return page.locator(".agent-row").filter(
            has=page.locator(".agent-row-name", has_text=re.compile(f"^{name}$"))
        )
    return node(page, name)


def start(page: Page, topic: str, *, review: bool = False, dataset: str | None = None) -> int:
    page.get_by_label("What should Canopy research?").fill(topic)
    page.get_by_label("Step budget").fill("8")
    if dataset:
        page.get_by_label("Knowledge base").select_option(label=dataset)
    if review:
        page.get_by_label("Review the plan first").check()
    page.get_by_role("button", name="Start research").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    return int(re.search(r"/runs/(\d+)/$", page.url).group(1))


def paste(page: Page, selector: str, text: str) -> None:
    page.locator(selector).focus()
    page.locator(selector).select_text()  # the analyst replaces the plan with their own
    page.evaluate(
        """([selector, text]) => {
            const data = new DataTransfer();
            data.setData("text/plain", text);
            const event = new ClipboardEvent(
                "paste", {clipboardData: data, bubbles: true, cancelable: true});
            document.querySelector(selector).dispatchEvent(event);
        }""",
        [selector, text],
    )


def test_a_reviewed_research_ends_with_its_report_on_stage(
    sized,
    server,
    web,
    scripted_llm,
    gates,
    alice,
    tmp_path,  # noqa: F811
):
    page = sized
    dataset = Dataset.objects.create(owner=alice, name="Birds")
    document = document_add(
        dataset=dataset, title="", data=PASSAGE.encode(), filename="dippers.txt"
    )
    chunk = document.chunks.get(position=0)
    kb = f"kb://dataset/{dataset.pk}/document/{document.pk}#{chunk.position}"
    article = f"{web.url}/article"
    topic = f"Dippers ({page.size_name}): how do they feed underwater?"
    report = (
        "# Dippers underwater\n\n## Findings\n\n"
        f"> {QUOTE}.\n>\n> — [dippers]({kb})\n\n"
        f"## On the web\n\nThey dive in winter too ([a field guide]({article})).\n\n"
        "## Doubts\n\nSome say they fly under water (https://example.invalid/made-up).\n"
    )
    scripted_llm.script(
        topic,
        call("write_plan", items=["Dives", "Prey"]),
        call("query", question="dippers feet stones"),
        call("read_page", url=article),
        call(
            "spawn_subagent",
            name="prey",
            reason="food",
            task="PREY-TASK: what they eat",
            plan_item=2,
        ),
        call("wait_subagents"),
        reply(report),
    )
    scripted_llm.script("PREY-TASK", gated(gates("prey"), reply("Prey report.")))

    log_in(page, server, "alice")
    root_id = start(page, topic, review=True, dataset="Birds")
    no_sideways_scroll(page, "start")

    # Paused on its plan: the page says it waits for the analyst, the review first in view.
    expect(page.locator("#plan-review")).to_be_visible()
    expect(page.locator("#run-status")).to_have_text("needs your review")
    expect(page.locator("#agent-count")).to_have_text("1 · waiting for you")
    expect(page.locator("#elapsed")).to_contain_text(" · waiting for you")
    expect(page).to_have_title(re.compile("^⏸ Needs your review · "))
    approve = page.get_by_role("button", name="Approve plan")
    expect(approve).to_have_class(re.compile("button-primary"))
    assert (
        page.evaluate("getComputedStyle(document.getElementById('plan-approve')).backgroundColor")
        == "rgb(47, 111, 237)"
    )
    if page.size_name == "desktop":
        box = approve.bounding_box()
        assert box["y"] + box["height"] <= 900, "the Approve button is below the fold"
    paste(page, "#plan-editor", "1. How dippers dive\n2. What dippers eat")
    editor = page.get_by_label("Plan items, one per line")
    expect(editor).to_have_value("How dippers dive\nWhat dippers eat")
    no_sideways_scroll(page, "paused")
    shot(page, tmp_path, "1-paused")
    approve.click()
    items = page.locator("#plan-items .plan-item")
    expect(items.nth(0)).to_contain_text("1. How dippers dive")
    expect(items.nth(0)).not_to_contain_text("1. 1.")

    # Working: the tiles, the tree and the list tell the same story.
    expect(agent(page, "prey")).to_be_visible()
    expect(page.locator("#agent-count")).to_have_text("2 · 2 working")
    expect(page.locator("#agents-done")).to_have_text("0 of 2 agents done")
    wait_for(lambda: Run.objects.get(pk=root_id).state == "waiting")
    no_sideways_scroll(page, "working")
    shot(page, tmp_path, "2-working")

    gates("prey").set()
    expect(page.locator("#run-status")).to_have_text("done")
    expect(page.locator("#agents-done")).to_have_text("2 of 2 agents done")
    expect(page).to_have_title(re.compile("^✓ Done"))
    # The report on stage, selected on the end, at reading width, with its contents.
    expect(page.locator("#report-stage")).to_be_in_viewport()
    stage = page.locator("#report")
    expect(stage).to_contain_text("Dippers underwater")
    expect(stage.locator("h1")).to_have_count(0)
    expect(stage.locator("h2").first).to_have_text("Dippers underwater")
    contents = page.locator(".report-contents")
    expect(contents.get_by_role("link")).to_have_text(
        ["Findings", "On the web", "Doubts", "Coverage and gaps"]
    )
    if page.size_name == "desktop":
        width = page.locator("#report-stage").bounding_box()["width"]
        assert width >= 0.6 * 1440, f"the report column is {width}px wide"
        reading = stage.bounding_box()["width"]
        assert 500 <= reading <= 800, f"the report reads {reading}px wide"
    web_link = stage.locator(f'a.citation[href="{article}"]')
    expect(web_link).to_have_attribute("target", "_blank")
    expect(web_link).to_have_attribute("rel", re.compile("noopener"))
    expect(stage.locator("a.citation.flagged")).to_have_attribute(
        "href", "https://example.invalid/made-up"
    )
    kb_link = stage.locator("a.citation.verified", has_text="Dippers and their dives")
    expect(kb_link).to_have_count(1)
    sources = page.locator(".report-sources .citation-item")
    expect(sources.first).to_contain_text("Dippers and their dives")
    expect(sources.first).not_to_contain_text("dippers ")
    no_sideways_scroll(page, "done")
    shot(page, tmp_path, "3-done")
    shot(page, tmp_path, "3-done-full")
    assert not any("Reconnecting" in text for text in page.evaluate("window.__connection"))
    assert_figures_agreed(page)

    # The kb:// citation opens the passage, the quoted words highlighted.
    page.goto(server.url + kb_link.get_attribute("href"))
    expect(page.get_by_role("heading", name="Dippers and their dives")).to_be_visible()
    expect(page.locator("mark.quoted")).to_have_text(QUOTE)
    no_sideways_scroll(page, "passage")
    shot(page, tmp_path, "4-passage")


LONG_DRAFT = "# Draft\n\n" + "\n".join(
    f"- claim {n}: **bold** text [link](https://x.org/{n})" for n in range(200)
)


def test_a_cancelled_research_reads_cancelled_and_the_verifier_shows_its_task_cut(
    sized,
    server,
    scripted_llm,
    gates,
    alice,
    tmp_path,  # noqa: F811
):
    page = sized
    topic = f"Herons ({page.size_name}): where do they fish?"
    scripted_llm.script(
        topic,
        call("list_siblings"),
        call(
            "spawn_subagents",
            subagents=[
                {
                    "name": "check",
                    "reason": "verify",
                    "task": "CHECK-TASK: the draft",
                    "kind": "verifier",
                },
                {"name": "shallows", "reason": "a", "task": "SHALLOWS-TASK: shallows"},
            ],
        ),
        call("wait_subagents"),
        reply("never"),
    )
    # The verifier is held in its model call while the page looks at it.
    scripted_llm.script(
        "CHECK-TASK", gated(gates("hold"), call("read_messages", wait_seconds=60)), reply("never")
    )
    scripted_llm.script("SHALLOWS-TASK", call("read_messages", wait_seconds=60), reply("never"))

    log_in(page, server, "alice")
    root_id = start(page, topic)
    expect(agent(page, "check")).to_be_visible()
    cancel = page.get_by_role("button", name="Cancel research")
    expect(cancel).to_be_in_viewport()
    if page.size_name == "phone":
        assert page.locator("#tree-card").get_attribute("data-view") == "list"
        expect(agent(page, "shallows")).to_be_visible()  # spawned with check, drawn apart
        row = agent(page, "shallows").bounding_box()
        assert row["height"] >= 44, "a list row is too small to tap"
    no_sideways_scroll(page, "working")

    # The verifier: its task cut and folded, not screens of Markdown. (agents.review writes
    # the whole draft into a verifier's task, past what a spawn may write.)
    Run.objects.filter(root_id=root_id, name="check").update(topic=f"CHECK-TASK\n{LONG_DRAFT}")
    expect(page.locator("#panel-title")).to_have_text("root")
    page.locator("#panel").evaluate("panel => { panel.scrollTop = 400; }")
    agent(page, "check").click()
    expect(page.locator("#panel-title")).to_have_text("check")
    expect(page.locator("#panel-title")).to_be_in_viewport()
    assert page.locator("#panel").evaluate("panel => panel.scrollTop") == 0
    task = page.locator("#panel .task-long")
    expect(task).to_contain_text("Show the whole task")
    # Its first words read as words, not Markdown: no "# Draft", no "**", no addresses.
    expect(task.locator(".task-start")).to_contain_text("CHECK-TASK Draft claim 0: bold text link")
    for markup in ("#", "**", "https://"):
        expect(task.locator(".task-start")).not_to_contain_text(markup)
    # Measured in the page in one go: a live event may load the panel again meanwhile, and
    # bounding_box() of the element it replaced is None (seen once in a full run).
    height = page.wait_for_function(
        "() => document.querySelector('#panel .task-long')?.getBoundingClientRect().height"
    ).json_value()
    assert height < 300
    expect(page.locator("#panel .task-text")).to_be_hidden()
    task.locator("summary").click()
    expect(page.locator("#panel .task-text")).to_contain_text("[cut: the task is")
    shot(page, tmp_path, "5-verifier")

    # The root's transcript: a tool call reads as its name, never as raw JSON.
    agent(page, "root").click()
    expect(page.locator("#panel-title")).to_have_text("root")
    page.locator("#panel summary", has_text="Transcript").click()
    transcript = page.locator("#panel .transcript")
    expect(transcript).to_contain_text("called list_siblings")
    expect(transcript).not_to_contain_text('{"raw"')

    cancel.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Cancel this research?")
    shot(page, tmp_path, "6-confirm")
    dialog.get_by_role("button", name="Yes, cancel the research").click()
    gates("hold").set()
    expect(page.locator("#run-status")).to_have_text("cancelled")
    expect(page.locator("#run-status")).to_have_class(re.compile("ending-cancelled"))
    expect(page.locator("#agents-done")).to_have_text("3 of 3 agents ended")
    expect(page).to_have_title(re.compile("^Cancelled"))
    expect(agent(page, "shallows")).to_have_attribute("data-ending", "cancelled")
    expect(page.locator("#panel .ending-note")).to_contain_text("Cancelled by the user.")
    expect(page.locator("#panel .alert-error")).to_have_count(0)
    assert Run.objects.get(pk=root_id).status == "failed"
    no_sideways_scroll(page, "cancelled")
    shot(page, tmp_path, "7-cancelled")
    assert_figures_agreed(page)


def test_an_agent_shows_the_state_its_model_call_moved_it_to(
    sized,
    server,
    scripted_llm,
    web,
    alice,
    tmp_path,  # noqa: F811
):
    """A model call's usage event carries the state the agent goes on to (no run.state of
    its own): while a slow page is read, the agent's node (its row on a phone) says it reads,
    and which page, with the call's step counted beside it; then the research ends."""
    page = sized
    topic = f"Kingfishers ({page.size_name}): how deep do they dive?"
    slow = f"{web.url}/slow?seconds=6"
    scripted_llm.script(topic, call("read_page", url=slow), reply("Kingfishers dive a metre."))

    log_in(page, server, "alice")
    root_id = start(page, topic)
    doing = ".agent-row-doing" if page.size_name == "phone" else ".node-state"
    expect(agent(page, "root").locator(doing)).to_contain_text("reading", timeout=5_000)
    if page.size_name == "desktop":
        expect(agent(page, "root")).to_have_attribute("data-state", "reading")
    expect(page.locator("#run-status")).to_have_text("working")
    moved = Event.objects.filter(root_id=root_id, type="run.usage").first().payload
    assert (moved["state"], moved["detail"]) == ("reading", slow)
    assert not Event.objects.filter(
        root_id=root_id, type="run.state", payload__state="reading"
    ).exists(), "the state rides on the usage event, not on an event of its own"
    panel = page.locator("#panel")
    expect(panel).to_contain_text("reading")
    no_sideways_scroll(page, "reading")
    shot(page, tmp_path, "9-reading")

    expect(page.locator("#run-status")).to_have_text("done", timeout=20_000)
    expect(page.locator("#report")).to_contain_text("Kingfishers dive a metre.")
    assert_figures_agreed(page)


EV_NOTES = b"""# EV batteries

Lithium iron phosphate (LFP) cells cost less per kWh and last longer than NMC cells.

CATL is the largest maker of electric-vehicle batteries, with more than a third of the market.

Battery recycling in Europe recovers lithium, nickel and cobalt from spent cells.
"""


def test_an_item_the_analyst_adds_in_review_is_researched_and_covered_on_the_page(
    sized,
    server,
    alice,
    tmp_path,  # noqa: F811
):
    """The demo model follows the approved plan: an item added in review gets an agent of its
    own, and the plan on the page shows it covered by that agent. An item whose agent found
    nothing to cite is a gap, on the plan and in the report's coverage, not "covered"."""
    page = sized
    dataset = Dataset.objects.create(owner=alice, name="EV notes")
    document_add(dataset=dataset, title="EV batteries", data=EV_NOTES, filename="ev.md")
    log_in(page, server, "alice")
    page.get_by_label("Model").select_option("demo")
    root_id = start(
        page, f"EV batteries ({page.size_name}): chemistry and market", review=True,
        dataset="EV notes",
    )  # fmt: skip
    expect(page.locator("#run-status")).to_have_text("needs your review")
    editor = page.get_by_label("Plan items, one per line")
    expect(editor).to_have_value(re.compile(r".+\n.+"))  # the lead's two items, once loaded
    written = editor.input_value().splitlines()
    editor.fill("\n".join([*written, "Battery recycling in Europe", "Kingfisher nesting habits"]))
    page.get_by_role("button", name="Approve plan").click()

    expect(page.locator("#run-status")).to_have_text("done", timeout=60_000)
    added = page.locator("#plan-items .plan-item").nth(2)
    expect(added).to_contain_text("Battery recycling in Europe")
    expect(added.locator(".plan-status")).to_have_text("covered")
    researcher = Run.objects.get(root_id=root_id, plan_item="Battery recycling in Europe")
    assert "Battery recycling in Europe" in researcher.topic and researcher.status == "done"
    expect(added.locator(".plan-agents")).to_contain_text(researcher.name)
    # The EV notes say nothing of kingfishers: its researcher ends done with nothing to cite.
    nothing = page.locator("#plan-items .plan-item").nth(3)
    expect(nothing.locator(".plan-status")).to_have_text("gap")
    expect(nothing.locator(".plan-agents")).to_contain_text("kingfisher")
    coverage = page.locator("#report")
    expect(coverage).to_contain_text("Item 4: Kingfisher nesting habits (gap)")
    expect(coverage).not_to_contain_text("Every item of the plan")
    page.locator("#plan-card").scroll_into_view_if_needed()
    shot(page, tmp_path, "6-plan-with-a-gap")
    no_sideways_scroll(page, "added item covered")
    shot(page, tmp_path, "5-added-item-covered")
    assert_figures_agreed(page)


def test_a_narrow_phone_never_scrolls_sideways_on_a_finished_research(
    browser,
    server,
    scripted_llm,
    alice,
    tmp_path,  # noqa: F811
):
    """360 px, the narrowest phone the issue names, on the page with the most in it."""
    context = browser.new_context(viewport={"width": 360, "height": 740}, has_touch=True)
    page = context.new_page()
    try:
        page.size_name = "narrow"
        topic = "Kingfishers at 360 px: a long report with a wide table and a long URL"
        wide = "| " + " | ".join(f"column {n}" for n in range(8)) + " |"
        scripted_llm.script(
            topic,
            reply(
                f"# Kingfishers\n\n{wide}\n|{'---|' * 8}\n\nSee "
                "https://example.org/a/very/long/path/that/does/not/break/anywhere/at/all/x\n"
            ),
        )
        log_in(page, server, "alice")
        start(page, topic)
        expect(page.locator("#run-status")).to_have_text("done")
        no_sideways_scroll(page, "done at 360 px")
        shot(page, tmp_path, "8-narrow-done")
    finally:
        context.close()


TILES = ("tree-tokens", "agent-count", "agents-done", "elapsed", "message-count")


def tiles(page: Page) -> dict[str, str]:
    return {tile: page.locator(f"#{tile}").inner_text() for tile in TILES}


def test_the_tiles_read_the_same_before_the_page_script_runs(
    browser,
    server,
    scripted_llm,
    alice,
    tmp_path,  # noqa: F811
):
    """The header's first paint, before the page's script has drawn it (here with no script
    at all), shows the tokens, agents, worked time and messages that the script then shows:
    never "–" beside a progress tile that already counts the agents. At both sizes."""
    topic = "Herons before the script: a root and one sub-agent"
    for size, (width, height) in SIZES.items():
        task = f"Herons' wading, seen at {size} size"
        scripted_llm.script(
            f"{topic} ({size})",
            call("spawn_subagent", name="wader", reason="one part", task=task),
            call("wait_subagents"),
            reply("Herons wade in shallow water."),
        )
        scripted_llm.script(task, reply("They wait, then strike."))
        drawn = browser.new_context(viewport={"width": width, "height": height})
        bare = browser.new_context(
            viewport={"width": width, "height": height}, java_script_enabled=False
        )
        try:
            page = drawn.new_page()
            page.size_name = size
            log_in(page, server, "alice")
            run_id = start(page, f"{topic} ({size})")
            expect(page.locator("#run-status")).to_have_text("done")
            expect(page.locator("#agents-done")).to_have_text("2 of 2 agents done")
            page.reload()
            expect(page.locator("#agent-count")).to_have_text("2")
            by_script = tiles(page)
            shot(page, tmp_path, "9-tiles-by-script")

            first = bare.new_page()
            first.size_name = f"{size}-first-paint"
            log_in(first, server, "alice")
            first.goto(f"{server.url}/runs/{run_id}/")
            at_first_paint = tiles(first)
            shot(first, tmp_path, "9-tiles-first-paint")
        finally:
            drawn.close()
            bare.close()
        assert "–" not in at_first_paint.values(), at_first_paint
        assert at_first_paint == by_script
        assert by_script["message-count"] == "0" and by_script["tree-tokens"].endswith(" out")


def test_a_lead_that_revises_the_approved_plan_shows_the_analyst_what_changed(
    sized,
    server,
    scripted_llm,
    alice,
    tmp_path,  # noqa: F811
):
    page = sized
    topic = f"Puffins ({page.size_name}): burrows and fish"
    scripted_llm.script(
        topic,
        call("write_plan", items=["Burrows", "Fish"]),
        call("write_plan", items=["Burrows", "Fish", "Predators"]),
        reply("the puffin report"),
    )
    log_in(page, server, "alice")
    start(page, topic, review=True)
    page.get_by_role("button", name="Approve plan").click()

    # The revision waits for the analyst again, saying what it changes.
    changes = page.locator("#plan-changes")
    expect(changes).to_have_text(
        "The lead revised the plan you approved (version 1): it adds “Predators”."
    )
    expect(page.locator("#run-status")).to_have_text("needs your review")
    no_sideways_scroll(page, "revised")
    shot(page, tmp_path, "9-revised")
    page.get_by_role("button", name="Approve plan").click()
    expect(page.locator("#run-status")).to_have_text("done")
    expect(changes).to_be_hidden()
    assert_figures_agreed(page)


def test_a_research_that_took_under_a_second_does_not_say_it_took_0_s(
    sized, server, scripted_llm, alice, tmp_path
):
    """make run's demo answers at once: its page said "Worked 0 s" and the list "took 0 s",
    as if nothing had run."""
    page = sized
    topic = f"Kingfishers in a flash ({page.size_name})"
    scripted_llm.script(topic, reply("# Kingfishers\n\nThey dive fast."))
    log_in(page, server, "alice")
    root_id = start(page, topic)
    expect(page.locator("#run-status")).to_have_text("done")
    finished = Run.objects.get(pk=root_id).finished_at
    Run.objects.filter(pk=root_id).update(started_at=finished - timedelta(milliseconds=400))

    page.reload()
    expect(page.locator("#elapsed")).to_have_text("under 1 s")  # the page's script
    expect(page.locator("#panel")).to_contain_text("under 1 s")  # the server's panel
    page.goto(f"{server.url}/")
    row = page.locator(f'tr[data-run-id="{root_id}"]')
    expect(row).to_contain_text("took under 1 s")
    row.scroll_into_view_if_needed()
    no_sideways_scroll(page, "list")
    shot(page, tmp_path, "9-under-a-second")
