"""`manage.py research` says what the run page and the runs list say for the same research: how
it ended (a cancelled research is cancelled, not "failed"), its agents "done" or "ended" by
the page's rule, and the time it worked (its waits for the analyst left out), not the
wall-clock time since it started."""

import re
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from frontend.library import Row
from frontend.terminal import render
from frontend.terminal.tree import TreeModel
from research import services
from research.endings import NOT_STARTED_IN_TIME
from research.models import Event, Run, State
from tests.test_cli import Terminal, fields, research


def _rich(monkeypatch, *args: str) -> str:
    monkeypatch.setenv("COLUMNS", "220")  # wide enough that no column is cut
    terminal = Terminal()
    call_command("research", *args, "--user", "alice", stdout=terminal)
    return re.sub(r"\x1b\[[0-9;]*m", "", terminal.getvalue())  # the words, not their colours


def _started_20_s_ago(run: Run) -> None:
    services.run_claim(run_id=run.pk)
    Run.objects.filter(pk=run.pk).update(started_at=timezone.now() - timedelta(seconds=20))


@pytest.fixture
def cancelled(tree_factory):
    """A research its analyst cancelled after 20 s: its lead and its two sub-agents cancelled."""
    root = tree_factory(children=("history", "semantics"), grandchildren=())
    _started_20_s_ago(root)
    services.run_cancel(run=root)  # ends the queued sub-agents; the lead's agent ends it:
    services.run_finish(run_id=root.pk, error=services.CANCELLED_BY_USER)
    return Run.objects.get(pk=root.pk)


# --- how a research ended ---------------------------------------------------------------------


def test_show_says_a_cancelled_research_ended_cancelled_and_its_agents_ended(db, alice, cancelled):
    shown = fields(research("show", str(cancelled.pk), "--user", "alice"))

    assert shown["status"] == "failed"  # the stored status, as the API has it
    assert shown["ending"] == "cancelled"
    assert re.fullmatch(r"3 of 3 agents ended · worked 2\d s", shown["progress"])


def test_show_on_a_terminal_says_cancelled_as_the_page_badge_does(
    db, alice, cancelled, monkeypatch
):
    out = _rich(monkeypatch, "show", str(cancelled.pk))

    (status,) = [line for line in out.splitlines() if "Status" in line]
    assert "cancelled" in status and "failed" not in status
    assert re.search(r"Progress +3 of 3 agents ended · worked 2\d s", out)


@pytest.mark.parametrize(
    ("ending", "word"), [("history notes", "done"), ("cancelled by the user", "ended")]
)
def test_agents_are_done_only_while_every_one_that_ended_ended_well(
    db, alice, tree_factory, ending, word
):
    root = tree_factory(children=("history", "semantics"), grandchildren=())
    history, semantics = Run.objects.filter(parent=root).order_by("id")
    services.run_finish(run_id=history.pk, report="history notes")
    if ending == "history notes":
        services.run_finish(run_id=semantics.pk, report=ending)
    else:
        services.run_finish(run_id=semantics.pk, error=ending)

    working = fields(research("show", str(root.pk), "--user", "alice"))
    services.run_finish(run_id=root.pk, report="# Report")
    ended = fields(research("show", str(root.pk), "--user", "alice"))

    assert working["progress"] == f"2 of 3 agents {word} · not started"
    assert ended["progress"] == f"3 of 3 agents {word} · not started"
    assert (working["ending"], ended["ending"]) == ("", "done")


def test_list_appends_the_ending_in_the_apis_words(db, alice, run_factory, cancelled):
    failed, late, queued = (run_factory(topic=topic) for topic in ("Failed", "Late", "Queued"))
    services.run_finish(run_id=failed.pk, error="llm: 500 from the endpoint")
    services.run_finish(run_id=late.pk, error=NOT_STARTED_IN_TIME)

    lines = research("list", "--user", "alice").splitlines()

    header = lines[0].split("\t")
    assert header == [*render.LIST_COLUMNS[:-1], "ending"] and header[-2] == "topic"
    endings = {int(row[0]): row[-1] for row in (line.split("\t") for line in lines[1:])}
    assert endings == {
        queued.pk: "",
        late.pk: "out_of_time",
        failed.pk: "failed",
        cancelled.pk: "cancelled",
    }


def test_list_on_a_terminal_says_how_each_research_ended(
    db, alice, run_factory, cancelled, monkeypatch
):
    """Its Status column said "failed" for a cancelled research: it reads as the runs list's
    badge does."""
    late = run_factory(topic="Late")
    services.run_finish(run_id=late.pk, error=NOT_STARTED_IN_TIME)

    out = _rich(monkeypatch, "list")

    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:] if line.strip()}
    assert rows[str(cancelled.pk)][1:2] == ["cancelled"]  # no parent: Status is second
    assert rows[str(late.pk)][1:4] == ["out", "of", "time"]


def test_the_summary_of_start_wait_says_the_ending_and_the_agents_ended(db, alice, cancelled):
    lines: list[str] = []

    render.plain_summary(cancelled, list(Run.objects.filter(root=cancelled)), lines.append)

    summary = fields("\n".join(line for line in lines if ": " in line))
    assert (summary["status"], summary["ending"]) == ("failed", "cancelled")
    assert re.fullmatch(r"3 of 3 agents ended · worked 2\d s", summary["progress"])


def test_cancel_of_an_ended_research_is_refused_as_the_api_refuses_it(db, alice, cancelled):
    """It printed its message and exited 0 where the API answers 409: a script could not
    tell a refused cancel from a done one. The same words as the API's, and exit 1."""
    with pytest.raises(CommandError) as refused:
        research("cancel", str(cancelled.pk), "--user", "alice")

    said = f"research {cancelled.pk} has ended (cancelled by the user): nothing to cancel."
    assert str(refused.value) == said


# --- the time worked ----------------------------------------------------------------------------


def _asked(run_factory) -> Run:
    """A research whose lead worked 0.3 s, then asked its questions 14 s ago."""
    root = run_factory(topic="Otters", clarify=True)
    services.run_claim(run_id=root.pk)
    assert services.clarify_ask(root_id=root.pk, questions=["Which otters?"])
    now = timezone.now()
    Run.objects.filter(pk=root.pk).update(
        started_at=now - timedelta(seconds=14.3), paused_at=now - timedelta(seconds=14)
    )
    return Run.objects.get(pk=root.pk)


def test_show_gives_the_time_worked_not_the_time_waiting_for_the_analyst(
    db, alice, run_factory, monkeypatch
):
    root = _asked(run_factory)

    waiting = fields(research("show", str(root.pk), "--user", "alice"))
    on_terminal = _rich(monkeypatch, "show", str(root.pk))
    services.clarify_answer(run=root, answers=["River otters"])
    services.run_claim(run_id=root.pk)
    services.run_finish(run_id=root.pk, report="# Otters")
    done = research("show", str(root.pk), "--user", "alice")

    assert waiting["progress"] == "0 of 1 agent done · worked under 1 s · waiting for you"
    assert re.search(r"Status +needs your answers", on_terminal)
    assert "worked under 1 s · waiting for you" in on_terminal
    root.refresh_from_db()
    assert round(root.paused_seconds) == 14
    assert fields(done)["progress"] == "1 of 1 agent done · worked under 1 s"
    # The runs list's figure, from the same time worked.
    assert Row.of(root, None).duration == "under 1 s"
    assert "14 s" not in done and "elapsed" not in done


def test_the_live_tree_runs_its_clock_as_the_page_does(db, alice, run_factory, subagent_factory):
    root = _asked(run_factory)
    child = subagent_factory(root, "facet")
    tree = TreeModel(root, list(Run.objects.filter(root=root)))

    assert tree.progress() == "0 of 2 agents done · worked under 1 s · waiting for you"

    tree.apply({"type": "run.state", "run": root.pk, "status": "working",
                "state": State.THINKING, "worked_seconds": 0.3})  # fmt: skip
    tree.apply({"type": "run.finished", "run": child.pk, "status": "failed", "state": "ended",
                "error": services.CANCELLED_BY_USER, "duration_seconds": 0.1})  # fmt: skip
    assert tree.progress() == "1 of 2 agents ended · worked under 1 s"
    tree.apply({"type": "run.finished", "run": root.pk, "status": "done", "state": "ended",
                "error": "", "duration_seconds": 0.5})  # fmt: skip
    assert tree.progress() == "2 of 2 agents ended · worked under 1 s"


def test_the_live_tree_of_a_tail_from_the_first_event_keeps_the_time_worked(db, alice, run_factory):
    # `tail` replays a research's events from its first: its claim said "worked 0 s" 20 s ago.
    root = run_factory(topic="Long at work")
    services.run_claim(run_id=root.pk)
    Event.objects.filter(root=root).update(at=timezone.now() - timedelta(seconds=20))
    Run.objects.filter(pk=root.pk).update(started_at=timezone.now() - timedelta(seconds=20))
    root.refresh_from_db()
    tree = TreeModel(root, [root])

    for event in Event.objects.filter(root=root).order_by("seq"):
        tree.apply(event.payload, at=event.at)

    assert re.fullmatch(r"0 of 1 agent done · worked 2\d s", tree.progress())


@pytest.mark.parametrize("asked", [False, True])
def test_the_cli_says_what_the_run_pages_tiles_say(
    db, alice, client, run_factory, tree_factory, asked
):
    if asked:  # waits for the analyst's answers
        root = _asked(run_factory)
    else:  # cancelled
        root = tree_factory(children=("history", "semantics"), grandchildren=())
        _started_20_s_ago(root)
        services.run_cancel(run=root)
        services.run_finish(run_id=root.pk, error=services.CANCELLED_BY_USER)
    client.force_login(alice)

    tiles = client.get(f"/runs/{root.pk}/").context["tiles"]
    shown = fields(research("show", str(root.pk), "--user", "alice"))

    assert shown["progress"] == f"{tiles['progress']} · worked {tiles['worked']}"
