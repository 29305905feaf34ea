"""Progress at a glance and the end of a research: "N of M agents done" and the elapsed time
on the run page, the runs list and the CLI; the title and a browser notification when it
ends. The browser test drives Debian's Chromium against a real daphne."""

import io
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import expect

from agents.llm.scripted import call, reply
from frontend.progress import elapsed_text
from frontend.terminal.tree import TreeModel
from research import services
from research.models import Run
from tests.test_browser import (  # noqa: F401  (fixtures)
    browser,
    gated,
    gates,
    log_in,
    page,
    server,
    start_research,
)

TOPIC = "Why do herons stand on one leg?"
CHILD_TASK = "HERON-TASK: what the studies of standing herons found"

# Records each notification the page shows (the real one is created too).
NOTIFICATION_SPY = """
(() => {
  const Real = window.Notification;
  window.__notifications = [];
  class Spy extends Real {
    constructor(title, options) {
      window.__notifications.push({ title, body: options && options.body });
      super(title, options);
    }
  }
  Object.defineProperty(Spy, "permission", { get: () => Real.permission });
  Spy.requestPermission = (...args) => Real.requestPermission(...args);
  window.Notification = Spy;
})();
"""


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "not started"),
        (0, "0 s"),
        (0.4, "under 1 s"),
        (59, "59 s"),
        (65, "1 min 05 s"),
        (3720, "1 h 02 min"),
    ],
)
def test_elapsed_time_reads_like_a_person_says_it(seconds, text):
    assert elapsed_text(seconds) == text


@pytest.mark.django_db
def test_the_live_status_of_the_runs_list_counts_agents_of_the_users_own_researches(
    client, alice, bob, tree_factory, run_factory, django_assert_max_num_queries
):
    root = tree_factory(children=("a", "b"), grandchildren=())
    first = root.children.order_by("id").first()
    Run.objects.filter(pk=root.pk).update(
        status="working", started_at=timezone.now() - timedelta(seconds=65)
    )
    services.run_finish(run_id=first.pk, report="a's notes")
    bobs = run_factory(owner=bob)
    client.force_login(alice)
    with django_assert_max_num_queries(4):  # session, user, roots, counts
        response = client.get(f"/runs/progress?ids={root.pk},{bobs.pk}")
    runs = response.json()["runs"]
    assert list(runs) == [str(root.pk)]  # bob's research is not alice's to see
    progress = runs[str(root.pk)]
    assert (progress["agents"], progress["done"], progress["active"]) == (3, 1, True)
    assert progress["agents_text"] == "1 of 3 agents done"
    assert "text" not in progress and "elapsed_seconds" not in progress  # the list reads neither
    assert client.get("/runs/progress?ids=1,x").json() == {
        "ids": ["ids must be 1 to 100 research ids separated by commas."]
    }


@pytest.mark.django_db
def test_a_cancelled_agent_makes_the_lists_line_say_ended_as_the_run_page_does(
    client, alice, tree_factory
):
    """The list's line ("1 of 3 agents done") counted a cancelled sub-agent as done, where
    the run page's header said "ended": one rule now (frontend.progress.agents_text)."""
    from research.endings import CANCELLED_BY_PARENT

    root = tree_factory(children=("a", "b"), grandchildren=())
    Run.objects.filter(pk=root.pk).update(status="working", started_at=timezone.now())
    services.run_finish(run_id=root.children.order_by("id").first().pk, error=CANCELLED_BY_PARENT)
    client.force_login(alice)
    progress = client.get(f"/runs/progress?ids={root.pk}").json()["runs"][str(root.pk)]
    assert progress["agents_text"] == "1 of 3 agents ended"
    assert "1 of 3 agents ended · " in client.get("/").content.decode()  # the first paint
    header = client.get(f"/runs/{root.pk}/").content.decode()
    assert re.search(r'id="agents-done">1 of 3 agents ended<', header)


@pytest.mark.django_db
def test_every_page_carries_the_words_its_scripts_redraw(client, alice, settings):
    """The scripts spelled the endings, their colours and the paused words again
    (static/page/format.js): every page now carries the server's, and the scripts read them."""
    import json
    from html import unescape

    from frontend.library import ENDING_LABELS
    from research import endings
    from research.standing import NEEDS_ANSWERS, NEEDS_REVIEW

    client.force_login(alice)
    for address in ("/", "/kb/"):
        drawn = client.get(address).content.decode()
        found = re.search(r'<script id="canopy-words" type="application/json">(.*?)<', drawn)
        assert found, address
        words = json.loads(unescape(found.group(1)))
        assert words["endings"] == {str(key): value for key, value in endings.WORDS.items()}
        assert words["endings"]["out_of_time"] == "out of time"
        assert words["tones"] == {str(key): tone for key, (_, tone) in ENDING_LABELS.items()}
        assert words["stopped"] == ["cancelled", "interrupted", "out_of_time"]
        assert words["needs"] == {"answers": NEEDS_ANSWERS, "review": NEEDS_REVIEW}
    static = settings.BASE_DIR / "static"
    scripts = "".join(
        (static / name).read_text()
        for name in ("runs.js", "page/format.js", "page/plan.js", "page/tiles.js")
    )
    for spelled in ('"out of time"', '"needs your review"', '"interrupted"'):
        assert spelled not in scripts, spelled  # said once, by the server


@pytest.mark.django_db
def test_the_runs_list_learns_of_researches_started_since_it_was_drawn(
    client, alice, bob, tree_factory, run_factory
):
    first = run_factory(owner=alice)
    client.force_login(alice)
    drawn = client.get("/").content.decode()
    assert f'data-newest="{first.pk}"' in drawn
    tree_factory(children=("a", "b"), grandchildren=())  # alice's: one research, three runs
    run_factory(owner=bob)  # not alice's to hear of

    response = client.get(f"/runs/progress?newest={first.pk}")

    assert response.json() == {"runs": {}, "newer": 1}
    for bad in ("x", "²", "9" * 5000):  # "²" passes str.isdigit; 5,000 digits int() refuses
        assert client.get(f"/runs/progress?newest={bad}").json() == {
            "newest": ["newest must be a research id."]
        }
    assert client.get("/runs/progress?ids=²").status_code == 400


@pytest.mark.django_db
def test_the_runs_list_and_the_cli_show_the_progress(client, alice, tree_factory):
    root = tree_factory(children=("a",), grandchildren=())
    client.force_login(alice)
    row = client.get("/").content.decode()
    assert "0 of 2 agents done · not started" in row
    out = io.StringIO()
    call_command("research", "show", str(root.pk), "--user", "alice", stdout=out)
    assert "progress: 0 of 2 agents done · not started" in out.getvalue()


@pytest.mark.django_db
def test_the_clis_live_tree_counts_agents_as_they_end(alice, tree_factory):
    root = tree_factory(children=("a",), grandchildren=())
    tree = TreeModel(root, list(Run.objects.filter(root=root)))
    started = timezone.now() - timedelta(seconds=30)
    tree.apply({"type": "run.state", "run": root.pk, "status": "working", "state": "thinking",
                "started_at": started.isoformat()})  # fmt: skip
    assert re.fullmatch(r"0 of 2 agents done · worked 3\d s", tree.progress())
    child = root.children.get()
    tree.apply({"type": "run.finished", "run": child.pk, "status": "done", "state": "ended",
                "finished_at": timezone.now().isoformat()})  # fmt: skip
    tree.apply({"type": "run.finished", "run": root.pk, "status": "done", "state": "ended",
                "finished_at": (started + timedelta(seconds=90)).isoformat(),
                "duration_seconds": 90.0})  # fmt: skip
    assert tree.progress() == "2 of 2 agents done · worked 1 min 30 s"


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_run_page_counts_agents_and_says_when_the_research_ends(
    browser,  # noqa: F811
    server,  # noqa: F811
    alice,
    scripted_llm,
    gates,  # noqa: F811
):
    scripted_llm.script(
        TOPIC,
        call("spawn_subagent", name="studies", reason="the evidence", task=CHILD_TASK),
        call("wait_subagents"),
        reply("Herons save heat standing on one leg."),
    )
    scripted_llm.script(CHILD_TASK, gated(gates("child"), reply("Studies say heat.")))
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    context.grant_permissions(["notifications"], origin=server.url)
    context.add_init_script(NOTIFICATION_SPY)
    run_page, runs_list = context.new_page(), context.new_page()
    errors: list[str] = []
    for tab in (run_page, runs_list):
        tab.on("pageerror", lambda error: errors.append(str(error)))
    try:
        log_in(run_page, server, "alice")
        root_id = start_research(run_page, TOPIC)
        expect(run_page.locator("#agents-done")).to_have_text("0 of 2 agents done")
        first = run_page.locator("#elapsed").inner_text()
        expect(run_page.locator("#elapsed")).not_to_have_text(first)  # it ticks
        expect(run_page.locator("#notify-me")).to_be_hidden()  # already allowed
        expect(run_page.get_by_role("link", name="PDF")).to_be_hidden()  # no report yet
        assert not run_page.title().startswith("✓")

        runs_list.goto(f"{server.url}/")
        row = runs_list.locator(f'tr[data-run-id="{root_id}"]')
        expect(row.locator("[data-status]")).to_have_text("working")
        expect(row.locator("[data-progress]")).to_contain_text("0 of 2 agents done · ")

        gates("child").set()
        expect(run_page.locator("#agents-done")).to_have_text("2 of 2 agents done")
        expect(run_page).to_have_title(re.compile(r"^✓ Done · Why do herons"))
        notifications = run_page.evaluate("window.__notifications")
        assert notifications == [{"title": "Research done", "body": TOPIC}]
        expect(run_page.get_by_role("link", name="PDF")).to_be_visible()
        expect(run_page.get_by_role("link", name="Markdown")).to_be_visible()
        stopped = run_page.locator("#elapsed").inner_text()
        run_page.wait_for_timeout(1500)
        assert run_page.locator("#elapsed").inner_text() == stopped  # the clock stopped

        # The list saw it end without a reload.
        expect(row.locator("[data-status]")).to_have_text("done", timeout=10_000)
        # As a reload draws an ended row: how long it took (its agents have their column).
        expect(row.locator("[data-progress]")).to_have_text(re.compile(r"^took (under 1|\d+) s$"))
    finally:
        context.close()
    assert errors == []
