"""`manage.py research`: the command line, through call_command (plain output, since a StringIO
is not a terminal) and as real processes over the scripted LLM and this test's database."""

import io
import json
import re
import signal
import subprocess
import sys
import threading
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.llm.scripted import call, reply, slow
from agents.runtime.pool import AgentPool
from frontend.terminal.render import watch_header
from research import services
from research.models import (
    Callback,
    Citation,
    Event,
    LLMCall,
    Message,
    Run,
    RunState,
    Source,
    Step,
)
from research.services.citations import citations_record
from tests.conftest import PROJECT, process_env, wait_finished, wait_for

HOOK = "https://hooks.example.org/canopy"


def research(*args: str) -> str:
    out = io.StringIO()
    call_command("research", *args, stdout=out)
    return out.getvalue()


def research_process(settings, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "research", *args],
        cwd=PROJECT,
        env=process_env(settings, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: subprocess.Popen, timeout: float = 30) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"the command did not end:\n{out}\n{err}") from None
    return process.returncode, out, err


def _rows(output: str) -> list[list[str]]:
    """The tab-separated rows of a plain listing, without its header."""
    return [line.split("\t") for line in output.splitlines()[1:] if line]


def section(output: str, title: str) -> list[list[str]]:
    """The tab-separated rows of a `title:` section, header first, up to the blank line."""
    lines = output.splitlines()
    start = lines.index(f"{title}:") + 1
    rows = []
    for line in lines[start:]:
        if not line:
            break
        rows.append(line.split("\t"))
    return rows


def fields(output: str) -> dict[str, str]:
    values = {}
    for line in output.splitlines():
        if not line:
            break
        key, _, value = line.partition(": ")
        values[key] = value
    return values


def script_team(llm, topic: str, *, facet=None) -> None:
    """The root spawns one sub-agent, waits for it, and writes a report; the sub-agent answers
    "facet notes", or as `facet` (a turn function) says."""
    llm.script(
        topic,
        call("spawn_subagent", name="facet", reason="one facet", task=f"{topic} facet"),
        call("wait_subagents"),
        reply("# Findings\n\nThe facet agent found **everything**."),
    )
    llm.script(f"{topic} facet", facet or reply("facet notes"))


@pytest.fixture
def finished_tree(tree_factory):
    """Alice's finished tree with usage, a transcript, a message and a checked citation."""
    root = tree_factory(children=("history", "semantics"), grandchildren=())
    history, semantics = Run.objects.filter(parent=root).order_by("id")
    for run, tokens in ((history, 100), (semantics, 200), (root, 300)):
        services.usage_add(run_id=run.pk, input_tokens=tokens, output_tokens=10, latency_ms=5)
        services.step_record(run_id=run.pk, kind="tool", tool="web_search", input={"q": "x"})
    services.message_record(from_run_id=history.pk, to_run_id=semantics.pk, text="see PEP 343")
    Source.objects.create(run=history, root=root, kind="page", url="https://peps.org/343")
    services.run_finish(run_id=history.pk, report="history notes")
    services.run_finish(run_id=semantics.pk, error="cancelled by the user")
    report = "# Context managers\n\nSee [PEP 343](https://peps.org/343) and https://made.up/x."
    citations_record(run_id=root.pk, report=report)
    services.run_finish(run_id=root.pk, report=report)
    root.refresh_from_db()
    return root


# --- start ---------------------------------------------------------------------------------


@pytest.mark.processes
def test_start_wait_prints_the_agents_and_the_report(
    transactional_db, scripted_llm, settings, alice
):
    script_team(scripted_llm, "Team topic")

    code, out, err = finished(
        research_process(settings, "start", "Team topic", "--wait", "--user", "alice")
    )

    assert code == 0, err
    root = Run.objects.get(parent=None)
    child = Run.objects.get(parent=root)
    assert (root.status, child.status) == ("done", "done")
    created = [line.split("\t") for line in out.splitlines() if "\trun.created\t" in line]
    assert [row[3] for row in created] == [str(root.pk), str(child.pk)]
    agents = section(out, "agents")
    assert agents[0][:4] == ["id", "parent_id", "depth", "name"]
    assert [row[:5] for row in agents[1:]] == [
        [str(root.pk), "", "0", "", "done"],
        [str(child.pk), str(root.pk), "1", "facet", "done"],
    ]
    assert f"tree_cost_usd: {root.tree_cost_usd}" in out
    assert out.split("report:\n", 1)[1].strip() == root.report.strip() != ""


@pytest.mark.processes
def test_start_wait_leaves_the_tree_to_a_running_agent_process(
    agent_pool, scripted_llm, settings, alice
):
    script_team(scripted_llm, "Served topic")

    code, out, err = finished(
        research_process(settings, "start", "Served topic", "--wait", "--user", "alice")
    )

    assert code == 0, err
    assert {run.worker_id for run in Run.objects.all()} == {agent_pool.worker_id}
    assert "running its agents in this process" not in err


@pytest.mark.processes
def test_start_wait_runs_the_tree_itself_when_no_process_claims_it(
    transactional_db, scripted_llm, settings, alice
):
    # A live agent process that claims no roots (another `start --wait`, say).
    bystander = AgentPool(claim_roots=False).start()
    script_team(scripted_llm, "Unclaimed topic")
    try:
        code, out, err = finished(
            research_process(settings, "start", "Unclaimed topic", "--wait", "--user", "alice")
        )
    finally:
        bystander.shutdown()

    assert code == 0, err
    # A pool that takes only the roots it is given is no process that would take this one:
    # the command runs the tree itself at once.
    assert "running its agents in this process" in err
    assert Run.objects.filter(status="done").count() == 2


def test_start_on_a_terminal_draws_the_tree_and_renders_the_report(
    transactional_db, scripted_llm, alice
):
    # No agent process is up: the command runs the tree in a pool of its own.
    script_team(scripted_llm, "Drawn topic")

    terminal = Terminal()
    call_command("research", "start", "Drawn topic", "--user", "alice", stdout=terminal)

    shown = terminal.getvalue()
    assert "\x1b[" in shown  # rich styling, not plain text
    assert "facet" in shown and "tree cost" in shown
    assert "Findings" in shown and "everything" in shown
    assert "**" not in shown and "# Findings" not in shown  # rendered as Markdown
    assert Run.objects.get(parent=None).status == "done"


def test_start_without_wait_prints_the_id_of_a_queued_run(db, alice):
    out = research("start", "A topic", "--no-wait", "--user", "alice", "--max-steps", "7")

    run = Run.objects.get()
    assert out.strip() == str(run.pk)
    assert (run.owner, run.topic, run.max_steps, run.status) == (alice, "A topic", 7, "queued")


def test_start_registers_a_callback_as_the_api_does_or_refuses_a_bad_one(db, alice):
    research("start", "A topic", "--no-wait", "--user", "alice", "--callback-url", HOOK)

    callback = Callback.objects.get()
    assert (callback.run, callback.url) == (Run.objects.get(), HOOK)
    with pytest.raises(CommandError, match="callback_url must be an https:// URL"):
        research("start", "B topic", "--no-wait", "--user", "alice", "--callback-url", "http://x")
    assert Run.objects.count() == 1  # refused before anything was stored


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["   "], "topic"),
        (["A topic", "--max-steps", "99"], "--max-steps"),
        (["A topic", "--model", "no-such-model"], "--model"),
        (["A topic", "--dataset", "12345"], "--dataset"),
    ],
)
def test_bad_input_is_refused_naming_the_field(db, alice, args, named):
    with pytest.raises(CommandError, match=f"invalid {named}: ") as refused:
        research("start", *args, "--no-wait", "--user", "alice")

    assert refused.value.returncode != 0
    assert not Run.objects.exists()


def test_a_fourth_working_research_is_refused(db, alice, run_factory):
    for _ in range(3):
        run_factory()

    with pytest.raises(CommandError, match="the limit is 3"):
        research("start", "One more", "--no-wait", "--user", "alice")


@pytest.mark.processes
def test_errors_exit_non_zero_with_a_clear_message(transactional_db, settings, alice, bob):
    bobs = services.run_start(owner=bob, topic="Bob's secret")
    cases = [
        (["show", "999999", "--user", "alice"], "no research with id 999999."),
        (["show", str(bobs.pk), "--user", "alice"], f"no research with id {bobs.pk}."),
        (["list", "--user", "mallory"], "no user named 'mallory'."),
    ]
    processes = [research_process(settings, *args) for args, _ in cases]

    for process, (args, message) in zip(processes, cases, strict=True):
        code, out, err = finished(process)
        assert code != 0, args
        assert message in err, (args, err)
        assert out == ""


# --- whose researches ------------------------------------------------------------------------


def test_another_users_run_is_not_found(db, alice, bob, run_factory):
    run = run_factory(owner=bob)

    for action in (["show"], ["tail"], ["cancel"], ["export", "--format", "json"]):
        with pytest.raises(CommandError, match=f"no research with id {run.pk}"):
            research(*action, str(run.pk), "--user", "alice")
    run.refresh_from_db()
    assert run.status == "queued"


def test_the_user_comes_from_canopy_user(db, alice, bob, run_factory, monkeypatch):
    run_factory(owner=bob, topic="Bob's")
    monkeypatch.setenv("CANOPY_USER", "bob")

    rows = research("list").splitlines()

    topic = rows[0].split("\t").index("topic")
    assert [row.split("\t")[topic] for row in rows[1:]] == ["Bob's"]


def test_the_sole_user_is_the_default_and_several_need_a_choice(
    db, alice, run_factory, monkeypatch
):
    monkeypatch.delenv("CANOPY_USER", raising=False)
    run_factory(topic="Alice's")
    assert "\tAlice's\t" in research("list").splitlines()[1]

    User.objects.create_user("zed")
    with pytest.raises(CommandError, match="pass --user or set CANOPY_USER"):
        research("list")


# --- list, show, export ----------------------------------------------------------------------


def test_list_round_trips_the_roots_of_the_user(db, alice, bob, run_factory, finished_tree):
    queued = run_factory(topic="A\ttab and\nnewline")
    run_factory(owner=bob)

    rows = research("list", "--user", "alice").splitlines()
    header, records = rows[0].split("\t"), [row.split("\t") for row in rows[1:]]

    assert header[:4] == ["id", "parent_id", "name", "status"]
    assert header[-2:] == ["topic", "ending"]  # the ending appended: the positions before hold
    assert [record[0] for record in records] == [str(queued.pk), str(finished_tree.pk)]
    by_id = {int(record[0]): dict(zip(header, record, strict=True)) for record in records}
    for run in Run.objects.filter(pk__in=by_id):
        listed = by_id[run.pk]
        assert listed["status"] == run.status and listed["steps"] == str(run.steps)
        assert Decimal(listed["tree_cost_usd"]) == run.tree_cost_usd
    assert by_id[queued.pk]["topic"] == "A tab and newline"
    assert (by_id[queued.pk]["ending"], by_id[finished_tree.pk]["ending"]) == ("", "done")


def test_list_filters_by_status_and_parent(db, alice, finished_tree, run_factory):
    run_factory()
    children = list(Run.objects.filter(parent=finished_tree).order_by("id"))

    def ids(*args: str) -> list[str]:
        return [row.split("\t")[0] for row in research("list", *args).splitlines()[1:]]

    assert ids("--status", "done", "--user", "alice") == [str(finished_tree.pk)]
    assert ids("--parent", str(finished_tree.pk), "--user", "alice") == [
        str(child.pk) for child in reversed(children)
    ]
    assert ids("--parent", str(finished_tree.pk), "--status", "failed", "--user", "alice") == [
        str(children[1].pk)
    ]
    assert len(ids("--all", "--user", "alice")) == 4


def test_show_round_trips_the_run_its_agents_usage_and_report(db, alice, finished_tree):
    out = research("show", str(finished_tree.pk), "--user", "alice")

    shown = fields(out)
    root = finished_tree
    assert shown["id"] == str(root.pk) and shown["status"] == "done"
    assert shown["topic"] == root.topic and shown["model"] == root.model
    assert (shown["steps"], shown["max_steps"]) == (str(root.steps), str(root.max_steps))
    assert Decimal(shown["tree_cost_usd"]) == root.tree_cost_usd
    assert shown["finished_at"] == root.finished_at.isoformat().replace("+00:00", "Z")
    agents = section(out, "agents")
    tree = list(Run.objects.filter(root=root).order_by("depth", "id"))
    assert [row[0] for row in agents[1:]] == [str(run.pk) for run in tree]
    assert [row[4] for row in agents[1:]] == [run.status for run in tree]
    (usage,) = section(out, "usage")[1:]
    assert usage[:4] == [root.model, "3", "600", "30"]
    assert Decimal(usage[4]) == sum(call.cost_usd for call in LLMCall.objects.all())
    assert out.split("report:\n", 1)[1].strip() == root.report


def _demo_run(run_factory) -> Run:
    run = run_factory(model="demo", topic="How do tides work?")
    services.usage_add(run_id=run.pk, input_tokens=10, output_tokens=5, latency_ms=1)
    services.run_finish(run_id=run.pk, report="# Tides\n\nThe moon pulls the sea.")
    return run


def test_star_marks_a_research_that_list_starred_then_shows_alone(db, alice, run_factory):
    otters = run_factory(topic="Otters")
    run_factory(topic="Beavers")

    said = research("star", str(otters.pk), "--user", "alice")
    starred = research("list", "--starred", "--user", "alice").splitlines()[1:]
    unstarred = research("star", str(otters.pk), "--off", "--user", "alice")

    assert said.strip() == f"research {otters.pk}: starred."
    assert [row.split("\t")[0] for row in starred] == [str(otters.pk)]
    assert unstarred.strip() == f"research {otters.pk}: star taken off."
    assert research("list", "--starred", "--user", "alice").splitlines()[1:] == []


def test_on_a_terminal_show_and_list_say_a_demo_run_is_the_offline_demo_model(
    db, alice, run_factory, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "200")  # wide enough that no column is cut
    demo = _demo_run(run_factory)

    for args in (("show", str(demo.pk)), ("list",)):
        terminal = Terminal()
        call_command("research", *args, "--user", "alice", stdout=terminal)
        assert "demo (offline demo model)" in terminal.getvalue(), args


def test_plain_list_and_show_keep_the_demo_model_machine_readable(db, alice, run_factory):
    demo = _demo_run(run_factory)

    listed = research("list", "--user", "alice").splitlines()
    shown = research("show", str(demo.pk), "--user", "alice")

    header, row = listed[0].split("\t"), listed[1].split("\t")
    assert row[header.index("model")] == "demo"
    assert fields(shown)["model"] == "demo"
    assert section(shown, "usage")[1][0] == "demo"
    assert "offline demo model" not in "\n".join(listed) + shown


def test_the_watch_header_names_the_demo_model_as_such(db, run_factory):
    demo = run_factory(model="demo", topic="How do tides work?")
    scripted = run_factory(topic="A question for a real model")

    assert watch_header(demo) == (
        f"research {demo.pk} on demo (offline demo model): How do tides work?"
    )
    assert watch_header(scripted) == (
        f"research {scripted.pk} on scripted: A question for a real model"
    )


def test_export_json_holds_the_whole_tree(db, alice, finished_tree):
    exported = json.loads(
        research("export", str(finished_tree.pk), "--format", "json", "--user", "alice")
    )

    tree = Run.objects.filter(root=finished_tree).order_by("depth", "id")
    assert exported["run_id"] == finished_tree.pk
    assert [
        (run["id"], run["status"], run["report"], run["error"]) for run in exported["runs"]
    ] == [(run.pk, run.status, run.report, run.error) for run in tree]
    assert [Decimal(run["cost_usd"]) for run in exported["runs"]] == [run.cost_usd for run in tree]
    assert [(state["run_id"], state["state"]) for state in exported["states"]] == list(
        RunState.objects.order_by("id").values_list("run_id", "state")
    )
    assert [(m["from_run_id"], m["to_run_id"], m["text"]) for m in exported["messages"]] == list(
        Message.objects.values_list("from_run_id", "to_run_id", "text")
    )
    assert [
        (u["run_id"], u["input_tokens"], Decimal(u["cost_usd"])) for u in exported["usage"]
    ] == list(LLMCall.objects.order_by("id").values_list("run_id", "input_tokens", "cost_usd"))
    assert [(s["run_id"], s["tool"], s["input"]) for s in exported["steps"]] == list(
        Step.objects.order_by("id").values_list("run_id", "tool", "input")
    )
    assert [(c["url"], c["verified"]) for c in exported["citations"]] == list(
        Citation.objects.order_by("id").values_list("url", "verified")
    )
    assert "events" not in exported


def test_export_json_of_a_sub_agent_holds_its_subtree_and_events(db, alice, finished_tree):
    history = Run.objects.get(parent=finished_tree, name="history")

    exported = json.loads(
        research("export", str(history.pk), "--format", "json", "--events", "--user", "alice")
    )

    assert [run["id"] for run in exported["runs"]] == [history.pk]
    assert {state["run_id"] for state in exported["states"]} == {history.pk}
    assert [m["text"] for m in exported["messages"]] == ["see PEP 343"]
    assert [event["seq"] for event in exported["events"]] == list(
        Event.objects.filter(root=finished_tree, payload__run=history.pk)
        .order_by("seq")
        .values_list("seq", flat=True)
    )


def test_export_md_is_the_report_with_its_sources_checked(db, alice, finished_tree):
    out = research("export", str(finished_tree.pk), "--user", "alice")

    assert out.startswith(finished_tree.report)
    assert "1. [PEP 343](https://peps.org/343): verified, seen by sub-agent history" in out
    assert "2. [https://made.up/x](https://made.up/x): not seen by any agent" in out


def test_export_md_of_a_run_without_a_report_is_refused(db, alice, run_factory):
    run = run_factory()

    with pytest.raises(CommandError, match=f"research {run.pk} has no report"):
        research("export", str(run.pk), "--format", "md", "--user", "alice")


def test_list_takes_the_same_queries_however_many_runs(
    db, alice, run_factory, settings, django_assert_num_queries
):
    settings.RESEARCH_MAX_WORKING_ROOTS = 10
    for _ in range(6):
        run_factory()

    with django_assert_num_queries(2):  # the user, the runs
        research("list", "--user", "alice")


def test_list_shows_a_page_and_says_how_to_get_the_next(db, alice, run_factory, settings, capsys):
    settings.RESEARCH_MAX_WORKING_ROOTS = 10
    ids = [run_factory(topic=f"topic {index}").pk for index in range(5)]

    first = research("list", "--user", "alice", "--limit", "2")
    hint = capsys.readouterr().err.strip()
    rest = research("list", "--user", "alice", "--limit", "2", "--before", str(ids[3]))

    assert [row[0] for row in _rows(first)] == [str(ids[4]), str(ids[3])]
    assert hint == f"more: manage.py research list --user alice --limit 2 --before {ids[3]}"
    assert [row[0] for row in _rows(rest)] == [str(ids[2]), str(ids[1])]


def test_list_before_another_users_run_is_not_found(db, alice, bob, run_factory):
    theirs = run_factory(owner=bob)

    with pytest.raises(CommandError, match=f"no research with id {theirs.pk}"):
        research("list", "--user", "alice", "--before", str(theirs.pk))


# --- cancel ------------------------------------------------------------------------------------


def test_cancel_ends_a_queued_research(db, alice, run_factory):
    run = run_factory()

    out = research("cancel", str(run.pk), "--user", "alice")

    run.refresh_from_db()
    assert "cancel requested" in out
    assert (run.status, run.error) == ("failed", services.CANCELLED_BY_USER)
    with pytest.raises(
        CommandError, match=r"has ended \(cancelled by the user\): nothing to cancel"
    ):
        research("cancel", str(run.pk), "--user", "alice")


# --- tail and Ctrl-C -----------------------------------------------------------------------


def test_tail_of_an_ended_sub_agent_prints_its_events_and_its_exit_status(db, alice, finished_tree):
    history, semantics = Run.objects.filter(parent=finished_tree).order_by("id")

    rows = [
        line.split("\t")
        for line in research("tail", str(history.pk), "--user", "alice").splitlines()
    ]
    with pytest.raises(
        CommandError, match=r"^research \d+ cancelled: cancelled by the user$"
    ) as failed:
        research("tail", str(semantics.pk), "--user", "alice")

    expected = Event.objects.filter(root=finished_tree, payload__run=history.pk).order_by("seq")
    assert [(int(row[0]), row[2]) for row in rows] == [(e.seq, e.type) for e in expected]
    assert {row[4] for row in rows} == {"history"}
    assert [row[5] for row in rows if row[2] == "run.message"] == ["to semantics: see PEP 343"]
    assert failed.value.returncode == 1


@pytest.mark.processes
def test_tail_prints_the_events_of_a_running_tree_in_order(
    agent_pool, scripted_llm, settings, alice
):
    # The sub-agent answers once the tail has printed its first line, not after a delay: a
    # tail slower to start than the delay (two test processes on two cores) saw the tree end.
    tailing = threading.Event()

    def held(messages):
        tailing.wait(30)
        return reply("facet notes")

    script_team(scripted_llm, "Tailed topic", facet=held)
    root = services.run_start(owner=alice, topic="Tailed topic")
    tail = research_process(settings, "tail", str(root.pk), "--user", "alice")

    first = tail.stdout.readline()
    root.refresh_from_db()
    assert root.status == "working"  # tail started while the tree ran
    tailing.set()
    # The pipe's buffer holds what readline() read ahead: read on through the same file.
    rest, err = tail.stdout.read(), tail.stderr.read()
    code = tail.wait(timeout=30)

    assert code == 0, err
    wait_finished(root)
    rows = [line.split("\t") for line in (first + rest).splitlines()]
    stored = list(Event.objects.filter(root=root).order_by("seq"))
    assert [(int(row[0]), row[2], int(row[3])) for row in rows] == [
        (event.seq, event.type, event.payload["run"]) for event in stored
    ]
    assert rows[-1][2:5] == ["run.finished", str(root.pk), "root"]
    # Seed 002's delegation end: how long it worked and how many tool calls it made.
    assert re.fullmatch(r"done in (under 1|\d+) s, \d+ tool calls", rows[-1][5])
    assert any(row[4] == "facet" and row[2] == "run.usage" for row in rows)
    # A model call's usage line says what the call moved the agent on to.
    spawned = next(row for row in rows if row[2] == "run.usage" and row[4] == "root")
    assert re.fullmatch(
        r"step 1: \d+ in, \d+ out, cost \S+ \(tree \S+\); spawning: facet", spawned[5]
    )


@pytest.mark.processes
def test_ctrl_c_stops_a_tail_and_the_research_goes_on(agent_pool, scripted_llm, settings, alice):
    # The research works until the test lets it end, not for a few seconds: a tail slower
    # to start than that saw it end and exited 0 before the Ctrl-C came.
    release = threading.Event()

    def held(messages):
        release.wait(30)
        return reply("late")

    scripted_llm.script("Long topic", held)
    root = services.run_start(owner=alice, topic="Long topic")
    try:
        tail = research_process(settings, "tail", str(root.pk), "--user", "alice")
        wait_for(lambda: tail.stdout.readline(), message="tail printed nothing")

        tail.send_signal(signal.SIGINT)
        code, _, err = finished(tail)

        assert code == 130
        assert f"stopped watching research {root.pk}; it goes on" in err
        root.refresh_from_db()
        assert root.status == "working"
    finally:
        release.set()
    assert wait_finished(root).report == "late"


@pytest.mark.processes
def test_ctrl_c_cancels_a_research_whose_agents_run_in_the_command(
    transactional_db, scripted_llm, settings, alice
):
    scripted_llm.script("Slow topic", slow(10, reply("too late")))
    start = research_process(settings, "start", "Slow topic", "--wait", "--user", "alice")
    wait_for(lambda: Run.objects.filter(status="working").exists(), message="never started")

    start.send_signal(signal.SIGINT)
    code, _, err = finished(start)

    assert code == 130, err
    run = Run.objects.get()
    assert (run.status, run.error) == ("failed", services.CANCELLED_BY_USER)


@pytest.mark.processes
def test_ctrl_c_as_soon_as_the_research_exists_cancels_it(
    transactional_db, scripted_llm, settings, alice
):
    # The earliest moment: the command has stored the research, its own pool may not have
    # started yet, nor its watch. Ctrl-C there once ended it with a traceback and left the
    # research failed as "the command running its agents stopped", or queued.
    scripted_llm.script("Early topic", slow(10, reply("too late")))
    start = research_process(settings, "start", "Early topic", "--wait", "--user", "alice")
    wait_for(lambda: Run.objects.exists(), message="never stored")

    start.send_signal(signal.SIGINT)
    code, _, err = finished(start)

    assert code == 130, err
    run = Run.objects.get()
    assert (run.status, run.error) == ("failed", services.CANCELLED_BY_USER)


# --- stored text with control characters ----------------------------------------------------

# Clears the screen, retitles the window, rings the bell, and a carriage return that would
# let the rest of the line overwrite what came before it.
HOSTILE = "Hostile \x1b[2J\x1b]0;pwned\x07 topic\rspoofed"


@pytest.fixture
def hostile_tree(db, run_factory, subagent_factory):
    """A finished tree whose text was stored before input was cleaned: written to the rows
    directly, as an older version (or another writer) left it."""
    root = run_factory(topic="Clean topic")
    digger = subagent_factory(root, "digger")
    services.run_finish(run_id=digger.pk, report="child report")
    services.run_finish(run_id=root.pk, report="clean report")
    report = "Line one\r\nLine\ttwo \x1b[31mred\x1b[0m\x9b1m"
    Run.objects.filter(pk=root.pk).update(topic=HOSTILE, report=report)
    Run.objects.filter(pk=digger.pk).update(name="dig\x1b]0;pwned\x07ger", error="e\rvil")
    return root


def _no_controls(text: str) -> None:
    for control in ("\x1b", "\x07", "\r", "\x9b"):
        assert control not in text, f"{control!r} printed raw in {text!r}"


def test_tail_prints_stored_control_characters_as_escapes(hostile_tree):
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "research", "tail", str(hostile_tree.pk), "--user", "alice", stdout=out, stderr=err
    )
    _no_controls(out.getvalue())
    _no_controls(err.getvalue())
    # The header is one line: the carriage return is a space there.
    assert "Hostile \\x1b[2J\\x1b]0;pwned\\x07 topic spoofed" in err.getvalue()


def test_tail_on_a_terminal_prints_no_stored_escape_sequence(hostile_tree):
    # Rich draws with escape sequences (and carriage returns) of its own: none of the stored.
    terminal = Terminal()
    call_command("research", "tail", str(hostile_tree.pk), "--user", "alice", stdout=terminal)
    shown = terminal.getvalue()
    for stored in ("\x1b[2J", "\x1b]0;pwned", "\x07", "\x9b"):
        assert stored not in shown
    assert "pwned" in shown  # shown as text, escaped


def test_a_markdown_export_prints_stored_control_characters_as_escapes(hostile_tree):
    shown = research("export", str(hostile_tree.pk), "--format", "md", "--user", "alice")
    _no_controls(shown)
    # Newlines and tabs are the format's own; a CR LF is a newline.
    assert "# Hostile \\x1b[2J" in shown
    assert "Line one\nLine\ttwo \\x1b[31mred\\x1b[0m\\x9b1m" in shown


# --- helpers -------------------------------------------------------------------------------


class Terminal(io.StringIO):
    """A StringIO that says it is a terminal, so the command draws with rich."""

    def isatty(self) -> bool:
        return True


# --- plans and notes -----------------------------------------------------------------------


def test_plan_approve_and_note_do_what_the_page_does(db, alice, bob, run_factory):
    run_id = int(
        research("start", "Reviewed topic", "--review-plan", "--no-wait", "--user", "alice")
    )
    run = Run.objects.get(pk=run_id)
    assert run.review_plan is True
    assert research("plan", str(run_id), "--user", "alice") == (
        f"research {run_id} has no plan yet.\n"
    )
    # What the lead does when it writes its plan (the agent is not running in this test).
    services.run_claim(run_id=run_id)
    services.plan_write(root_id=run_id, items=["Tides", "The moon"])
    services.plan_pause(root_id=run_id)

    shown = research("plan", str(run_id), "--user", "alice").splitlines()
    assert shown == [
        f"research {run_id}: plan version 1 (waiting for your approval)",
        "1\topen\tTides",
        "2\topen\tThe moon",
        f"approve it: manage.py research approve {run_id} [--item TEXT ...]",
    ]
    with pytest.raises(CommandError, match="invalid --item: plan item 2 is empty."):
        research("approve", str(run_id), "--item", "Tides", "--item", " ", "--user", "alice")
    with pytest.raises(CommandError, match=f"no research with id {run_id}"):
        research("approve", str(run_id), "--user", "bob")
    approved = research(
        "approve",
        str(run_id),
        "--item",
        "Tides",
        "--item",
        "Moon",
        "--item",
        "Sun",
        "--user",
        "alice",
    )
    assert approved == f"research {run_id}: plan version 2 approved; the research resumes.\n"
    run.refresh_from_db()
    assert run.status == "queued"

    sent = research("note", str(run_id), "Mind the spring tides", "--user", "alice")
    assert sent.startswith("note ") and sent.endswith(
        f" sent to the lead agent of research {run_id}; it reads it at its next step.\n"
    )
    services.run_finish(run_id=run_id, report="done")
    with pytest.raises(CommandError, match=r"^the root agent \(run \d+\) has ended \(done\)"):
        research("note", str(run_id), "too late", "--user", "alice")


@pytest.mark.processes
def test_a_reviewed_research_run_by_the_command_resumes_there_once_approved(
    transactional_db, scripted_llm, settings, alice
):
    topic = "Reviewed in the terminal"
    scripted_llm.script(topic, call("write_plan", items=["Only item"]), reply("Terminal report."))
    process = research_process(
        settings, "start", topic, "--review-plan", "--wait", "--user", "alice"
    )
    try:
        root = wait_for(
            lambda: Run.objects.filter(topic=topic, status="paused").first(), timeout=30
        )
        approved = research("approve", str(root.pk), "--user", "alice")
        assert approved.endswith("approved; the research resumes.\n")
        code, out, err = finished(process)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, err
    root.refresh_from_db()
    assert root.status == "done" and root.report.startswith("Terminal report.")
