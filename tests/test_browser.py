"""The live page in Debian's Chromium, against a real daphne with the agent pool, the test's
database and the scripted LLM. The agents are paced by gates the test opens, so each thing the
page should show happens when the test looks for it.
"""

import functools
import json
import os
import re
import threading
from decimal import Decimal

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, expect, sync_playwright

from agents.llm.scripted import call, calls, reply
from frontend.exports import CHROMIUM_FLAGS
from frontend.templatetags.canopy import usd
from research.models import Message, Run
from tests.conftest import PASSWORD, start_daphne, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
# The flags this machine's Chromium needs are the PDF printer's (one list of them).
CHROMIUM_ARGS = CHROMIUM_FLAGS
XSS = '<script>window.pwned = "script"</script><img src=x onerror="window.pwned = \'img\'">'
TOPIC = "Otters in the valley: what brought them back?"
HISTORY_TASK = "HISTORY-TASK: trace when the animals came back to the river"
ECOLOGY_TASK = "ECOLOGY-TASK: explain what they eat there now"
TIMEOUT_MS = 15_000

expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture(scope="module")
def browser() -> Browser:
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    # Playwright's sync API keeps an event loop running in this thread, and Django refuses
    # ORM calls from a thread with a running loop. The test's own calls are plain sync code;
    # the server under test is started with the check on (see `server`).
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def server(web, transactional_db, scripted_llm, settings, tmp_path):
    """daphne_server, with the fake web allowed and Django's async-safety check left on."""
    server = start_daphne(settings, tmp_path, DJANGO_ALLOW_ASYNC_UNSAFE="")
    yield server
    server.stop()


@pytest.fixture
def page(browser: Browser):
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert errors == [], "the page raised JavaScript errors"


@pytest.fixture
def gates():
    """Named events the scripted turns wait for; all opened at teardown so no turn hangs."""
    opened: dict[str, threading.Event] = {}

    def gate(name: str) -> threading.Event:
        return opened.setdefault(name, threading.Event())

    yield gate
    for event in opened.values():
        event.set()


def gated(gate: threading.Event, turn):
    """A scripted turn answered only once the test opens `gate`."""

    def answer(messages):
        assert gate.wait(30), "the test never opened this gate"
        return turn

    return answer


@functools.cache
def server_password_hash() -> str:
    """PASSWORD hashed the way the server's settings can check (the tests' MD5 is not)."""
    hasher = PBKDF2PasswordHasher()
    return hasher.encode(PASSWORD, hasher.salt())


def log_in(page: Page, server, username: str) -> None:
    User.objects.filter(username=username).update(password=server_password_hash())
    page.goto(f"{server.url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Start a research")).to_be_visible()


def start_research(page: Page, topic: str) -> int:
    page.get_by_label("What should Canopy research?").fill(topic)
    page.get_by_label("Step budget").fill("8")
    page.get_by_role("button", name="Start research").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    return int(re.search(r"/runs/(\d+)/$", page.url).group(1))


def node(page: Page, name: str):
    return page.locator("g.node").filter(
        has=page.locator(".node-name", has_text=re.compile(f"^{name}$"))
    )


def node_id(page: Page, name: str) -> int:
    return int(node(page, name).get_attribute("data-run-id"))


def tree_cost(page: Page) -> Decimal:
    return Decimal(page.locator("#tree-cost").inner_text().lstrip("$").replace(",", ""))


def page_seq(page: Page) -> int:
    return page.evaluate("window.canopy.lastSeq")


def db_seq(root_id: int) -> int:
    return Run.objects.values_list("event_seq", flat=True).get(pk=root_id)


def test_a_research_grows_live_and_a_dropped_socket_loses_nothing(
    page, server, web, scripted_llm, gates, alice
):
    article = f"{web.url}/article"
    report = (
        "# Otters\n\nThey came back in 2019 "
        f"([Otters return to the valley]({article})).\n\nA page held this: {XSS}\n"
    )
    spawn_both = calls(
        call("spawn_subagent", name="history", reason="dates", task=HISTORY_TASK, max_steps=5),
        call("spawn_subagent", name="ecology", reason="food", task=ECOLOGY_TASK, max_steps=5),
    )
    scripted_llm.script(
        TOPIC,
        gated(gates("spawn"), spawn_both),
        call("read_page", url=article),
        call("wait_subagents"),
        reply(report),
    )
    scripted_llm.script(
        HISTORY_TASK,
        gated(gates("message"), call("send_message", to="ecology", text=f"Census! {XSS}")),
        gated(gates("finish"), reply("History report.")),
    )
    scripted_llm.script(
        ECOLOGY_TASK,
        call("read_messages", wait_seconds=20),
        gated(gates("gap"), call("send_message", to="history", text="Thanks, history.")),
        reply("Ecology report."),
    )

    log_in(page, server, "alice")
    root_id = start_research(page, TOPIC)

    # The root appears at once; nothing is spent while its first model call is held.
    expect(node(page, "root")).to_be_visible()
    expect(page.locator("#tree-cost")).to_have_text("$0.00")

    gates("spawn").set()
    expect(node(page, "history")).to_be_visible()
    expect(node(page, "ecology")).to_be_visible()
    expect(page.locator("g.node")).to_have_count(3)

    gates("message").set()
    history, ecology = node_id(page, "history"), node_id(page, "ecology")
    arrow = page.locator(f'.message-arrow[data-from="{history}"][data-to="{ecology}"]')
    expect(arrow).to_have_count(1)
    expect(page.locator("#tree-cost")).not_to_have_text("$0.00")
    assert tree_cost(page) > 0

    # Every agent now waits on a gate: the tree is still and the page has caught up with it.
    wait_for(
        lambda: (
            len(scripted_llm.requests_for(TOPIC)) == 3
            and len(scripted_llm.requests_for(HISTORY_TASK)) == 2
            and len(scripted_llm.requests_for(ECOLOGY_TASK)) == 2
            and Run.objects.get(pk=root_id).state == "waiting"
        ),
        message="the agents did not reach their gates",
    )
    wait_for(lambda: page_seq(page) == db_seq(root_id), message="the page fell behind")

    # Drop the socket and keep the page offline while the research goes on and ends.
    page.context.set_offline(True)
    page.evaluate("window.canopy.socket.close()")
    expect(page.locator("#connection")).to_have_attribute("data-state", "offline")
    dropped_at = page_seq(page)
    gates("gap").set()
    wait_for(lambda: Message.objects.filter(from_run_id=ecology).exists())
    gates("finish").set()
    wait_for(lambda: Run.objects.get(pk=root_id).status == "done", message="no report")
    final_seq = db_seq(root_id)
    assert final_seq > dropped_at + 5, "the research should have moved on while offline"
    assert page_seq(page) == dropped_at

    page.context.set_offline(False)
    expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    wait_for(lambda: page_seq(page) == final_seq, message="the page did not catch up")
    assert page.evaluate("window.canopy.reconnects") >= 1

    # The page holds every node, state, message and arrow the database holds.
    runs = Run.objects.filter(root_id=root_id)
    assert sorted(
        page.eval_on_selector_all(
            "g.node",
            "nodes => nodes.map(n => [+n.dataset.runId, n.dataset.status, n.dataset.state])",
        )
    ) == sorted([run.pk, run.status, run.state] for run in runs)
    messages = Message.objects.filter(from_run__root_id=root_id).order_by("id")
    expect(page.locator("#message-feed li")).to_have_count(messages.count())
    assert page.eval_on_selector_all(
        "#message-feed li", "items => items.map(i => Number(i.dataset.messageId))"
    ) == [message.pk for message in messages]
    expect(
        page.locator(f'.message-arrow[data-from="{ecology}"][data-to="{history}"]')
    ).to_have_count(1)
    expect(page.locator("#tree-cost")).to_have_text(usd(Run.objects.get(pk=root_id).tree_cost_usd))
    expect(page.locator("#run-status")).to_have_text("done")

    # The root's report, with its citation verified and the page's markup shown as text.
    report_box = page.locator("#report")
    expect(report_box).to_contain_text("They came back in 2019")
    citation = report_box.locator("a.citation.verified")
    expect(citation).to_have_attribute("href", article)
    # The report's own list (the panel may hold the same one, folded, for the root).
    expect(report_box.locator(".citation-item.verified")).to_contain_text("seen by the root agent")
    expect(report_box).to_contain_text('<script>window.pwned = "script"</script><img src=x')
    expect(report_box.locator("img, script")).to_have_count(0)

    # A message with markup is text in the feed and in the sender's panel (chosen by keyboard).
    expect(page.locator("#message-feed")).to_contain_text("Census! <script>")
    node(page, "history").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#panel-title")).to_have_text("history")
    expect(page.locator("#panel .feed")).to_contain_text("Census! <script>window.pwned")
    expect(page.locator("#panel img, #message-feed img")).to_have_count(0)
    assert page.evaluate("window.pwned") is None


def test_cancelling_a_sub_agent_from_its_panel_ends_only_it(
    page, server, scripted_llm, gates, alice
):
    topic = "Beavers and dams: who builds what?"
    scripted_llm.script(
        topic,
        calls(
            call("spawn_subagent", name="steady", reason="a", task="STEADY-TASK: dams"),
            call("spawn_subagent", name="stuck", reason="b", task="STUCK-TASK: lodges"),
        ),
        call("wait_subagents"),
        reply("Root report."),
    )
    scripted_llm.script("STEADY-TASK", gated(gates("steady"), reply("Steady report.")))
    scripted_llm.script("STUCK-TASK", call("read_messages", wait_seconds=60), reply("never"))

    log_in(page, server, "alice")
    root_id = start_research(page, topic)
    expect(node(page, "stuck")).to_have_attribute("data-state", "waiting")

    node(page, "stuck").click()
    expect(page.locator("#panel-title")).to_have_text("stuck")
    page.get_by_role("button", name="Cancel sub-agent").click()
    page.get_by_role("button", name="Yes, cancel stuck").click()

    expect(node(page, "stuck")).to_have_attribute("data-status", "failed")
    expect(page.locator("#panel")).to_contain_text("Cancelled by the user.")
    expect(node(page, "stuck")).to_have_attribute("data-ending", "cancelled")
    expect(node(page, "stuck").locator(".node-state")).to_have_text("cancelled")
    expect(node(page, "steady")).to_have_attribute("data-status", "working")
    expect(node(page, "root")).to_have_attribute("data-status", "working")

    gates("steady").set()
    expect(node(page, "root")).to_have_attribute("data-status", "done")
    runs = {run.name: run for run in Run.objects.filter(root_id=root_id)}
    assert (runs["stuck"].status, runs["stuck"].error) == ("failed", "cancelled by the user")
    assert (runs["steady"].status, runs["steady"].report) == ("done", "Steady report.")
    assert (runs[""].status, runs[""].report) == ("done", "Root report.")


def test_nodes_show_each_agents_kind_and_tier_and_the_panel_its_model(
    page, web, transactional_db, scripted_llm, gates, alice, settings, tmp_path
):
    server = start_daphne(
        settings,
        tmp_path,
        DJANGO_ALLOW_ASYNC_UNSAFE="",
        RESEARCH_MODEL_PRICES=json.dumps(
            {"scripted": [1, 2], "scripted-large": [2, 8], "scripted-small": [1, 1]}
        ),
        RESEARCH_MODEL_TIERS='{"high": "scripted-large", "low": "scripted-small"}',
    )
    try:
        topic = "Kingfishers: where do they nest and what do they eat?"
        scripted_llm.script(
            topic,
            call(
                "spawn_subagents",
                subagents=[
                    {"name": "nests", "reason": "a", "task": "NESTS-TASK: banks", "tier": "high"},
                    {
                        "name": "check",
                        "reason": "b",
                        "task": "CHECK-TASK: the draft",
                        "kind": "verifier",
                        "tier": "low",
                    },
                ],
            ),
            call("wait_subagents"),
            reply("Root report."),
        )
        scripted_llm.script("NESTS-TASK", gated(gates("nests"), reply("Nests report.")))
        scripted_llm.script("CHECK-TASK", gated(gates("check"), reply("Check report.")))

        log_in(page, server, "alice")
        start_research(page, topic)
        expect(node(page, "nests").locator(".node-kind")).to_have_text("researcher · high")
        expect(node(page, "check").locator(".node-kind")).to_have_text("verifier · low")
        expect(node(page, "check")).to_have_attribute("data-kind", "verifier")
        expect(node(page, "check")).to_have_attribute("data-tier", "low")
        expect(node(page, "root").locator(".node-kind")).to_have_text("")

        node(page, "check").click()
        expect(page.locator("#panel-title")).to_have_text("check")
        expect(page.locator("#panel .panel-kicker")).to_contain_text("Verifier")
        expect(page.locator("#panel")).to_contain_text("scripted-small")
        expect(page.locator("#panel .badge-tier")).to_have_text("tier low")

        gates("nests").set()
        gates("check").set()
        expect(node(page, "root")).to_have_attribute("data-status", "done")
        label = node(page, "nests").get_attribute("aria-label")
        assert "researcher on tier high (scripted-large)" in label
        assert re.search(r"worked (under 1|\d+) s with 0 tool calls", label)  # duration_text
    finally:
        server.stop()


def test_an_analyst_approves_an_edited_plan_and_sends_a_note_from_the_page(
    page, web, server, scripted_llm, gates, alice
):
    topic = "Dippers: how do they feed underwater?"
    scripted_llm.script(
        topic,
        call("write_plan", items=["Diving", "Prey"]),
        call(
            "spawn_subagents",
            subagents=[
                {"name": "diving", "reason": "a", "task": "DIVING-TASK: dives", "plan_item": 1},
                {"name": "prey", "reason": "b", "task": "PREY-TASK: prey", "plan_item": 2},
            ],
        ),
        call("wait_subagents"),
        call("wait_subagents"),
        reply("Dipper report."),
    )
    # Diving cites a page it read: its item is covered. Prey cites nothing: a gap.
    article = f"{web.url}/article"
    scripted_llm.script(
        "DIVING-TASK",
        gated(gates("children"), call("read_page", url=article)),
        reply(f"Dives report ([the article]({article}))."),
    )
    scripted_llm.script("PREY-TASK", gated(gates("children"), reply("Prey report.")))

    log_in(page, server, "alice")
    page.get_by_label("What should Canopy research?").fill(topic)
    page.get_by_label("Review the plan first").check()
    page.get_by_role("button", name="Start research").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    root_id = int(re.search(r"/runs/(\d+)/$", page.url).group(1))

    # The research pauses on its plan; the analyst edits it and approves it.
    expect(page.locator("#run-status")).to_have_text("needs your review")
    expect(page.locator("#plan-review")).to_be_visible()
    editor = page.get_by_label("Plan items, one per line")
    expect(editor).to_have_value("Diving\nPrey")
    editor.fill("How dippers dive\nWhat dippers eat\nWhere dippers nest")
    page.get_by_role("button", name="Approve plan").click()
    expect(page.locator("#plan-review")).to_be_hidden()
    expect(page.locator("#plan-version")).to_have_text("version 2 · approved")
    items = page.locator("#plan-items .plan-item")
    expect(items).to_have_count(3)
    expect(items.nth(0)).to_have_attribute("data-status", "working")
    expect(items.nth(0)).to_contain_text("1. How dippers dive")
    expect(items.nth(2)).to_have_attribute("data-status", "open")

    # The root waits for its children; a note from the page releases it.
    expect(node(page, "root")).to_have_attribute("data-state", "waiting")
    expect(page.locator("#note-target")).to_have_text("the root agent")
    page.get_by_label("Note to the root agent").fill("Cover the nesting item yourself.")
    page.get_by_role("button", name="Send note").click()
    expect(page.locator("#note-status")).to_have_text("Sent to the root agent.")
    note = page.locator("#message-feed .feed-item.note")
    expect(note).to_contain_text("the analyst → root")
    expect(note).to_contain_text("Cover the nesting item yourself.")
    wait_for(lambda: len(scripted_llm.requests_for(topic)) >= 4)
    fourth = scripted_llm.requests_for(topic)[3]["messages"]
    assert any(
        m["role"] == "user" and m["content"].endswith("] Cover the nesting item yourself.")
        for m in fourth
    )

    gates("children").set()
    expect(node(page, "root")).to_have_attribute("data-status", "done")
    expect(items.nth(0)).to_have_attribute("data-status", "covered")
    expect(items.nth(1)).to_have_attribute("data-status", "gap")  # done, but found nothing
    expect(items.nth(1).locator(".plan-status")).to_have_text("gap")
    expect(items.nth(2)).to_have_attribute("data-status", "gap")
    report = Run.objects.get(pk=root_id).report
    assert report.startswith("Dipper report.")
    assert "- Item 2: What dippers eat (gap)" in report


def test_bob_gets_no_page_and_no_socket_for_alices_research(page, server, alice, bob, run_factory):
    root = run_factory(topic="Alice's private question")

    log_in(page, server, "bob")
    response = page.goto(f"{server.url}/runs/{root.pk}/")
    assert response.status == 404
    assert "Alice's private question" not in page.content()

    page.goto(f"{server.url}/")
    refusal = page.evaluate(
        """rootId => new Promise(resolve => {
            const socket = new WebSocket(`ws://${location.host}/ws/runs/${rootId}/`);
            const received = [];
            socket.onmessage = (message) => received.push(message.data);
            socket.onclose = (event) => resolve({code: event.code, received});
        })""",
        root.pk,
    )
    assert refusal == {"code": 4404, "received": []}
