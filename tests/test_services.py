"""The services, the one writer: names, limits, inheritance, usage roll-up, ending, races."""

import threading
from collections.abc import Callable
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection

from research import services
from research.errors import InvalidInput, TooManyRuns
from research.events.payloads import iso
from research.models import Dataset, LLMCall, Run, Status, Worker

# --- Sub-agents ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_second_sub_agent_with_the_same_name_under_one_parent_is_refused(
    run_factory, subagent_factory
):
    root = run_factory()
    subagent_factory(root, "history")

    with pytest.raises(IntegrityError):
        subagent_factory(root, "history")

    assert list(root.children.values_list("name", flat=True)) == ["history"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("   ", "task must not be empty."),
        ("x" * 2001, "task is 2001 characters long; the limit is 2000."),
    ],
)
def test_a_sub_agent_task_is_checked_like_a_topic_and_named_task(run_factory, task, message):
    root = run_factory()

    with pytest.raises(InvalidInput) as refused:
        services.subagent_spawn(parent_id=root.pk, name="history", reason="split", task=task)

    assert (refused.value.field, refused.value.message) == ("task", message)
    assert not root.children.exists()


@pytest.mark.django_db
def test_a_spawned_sub_agent_keeps_its_task_as_its_topic(run_factory):
    root = run_factory()

    child = services.subagent_spawn(
        parent_id=root.pk, name="history", reason="split", task="  the history of tides  "
    )

    assert child.topic == "the history of tides"


@pytest.mark.django_db
def test_the_same_name_under_different_parents_is_allowed(run_factory, subagent_factory):
    root = run_factory()
    first, second = subagent_factory(root, "a"), subagent_factory(root, "b")

    subagent_factory(first, "examples")
    subagent_factory(second, "examples")

    assert Run.objects.filter(root=root, name="examples").count() == 2


@pytest.mark.django_db
def test_a_sub_agent_inherits_owner_model_dataset_and_worker(alice, run_factory, subagent_factory):
    dataset = Dataset.objects.create(owner=alice, name="papers")
    worker = Worker.objects.create(hostname="box", pid=1, heartbeat_at="2030-01-01T00:00Z")
    root = run_factory(model="gpt-4o-mini", dataset_id=dataset.pk)
    services.run_claim(run_id=root.pk, worker_id=worker.pk)

    child = subagent_factory(root, "a", max_steps=3)
    grandchild = subagent_factory(child, "b")

    for run in (child, grandchild):
        assert (run.owner, run.model, run.dataset, run.worker) == (
            alice,
            "gpt-4o-mini",
            dataset,
            worker,
        )
        assert run.root_id == root.pk
        assert run.status == Status.QUEUED
    assert (child.depth, grandchild.depth) == (1, 2)
    assert child.max_steps == 3


# --- Starting: the working-roots limit -----------------------------------------------------------


@pytest.mark.django_db
def test_fourth_start_raises_too_many_runs(run_factory):
    for _ in range(3):
        run_factory()

    with pytest.raises(TooManyRuns, match="the limit is 3"):
        run_factory()


@pytest.mark.django_db(transaction=True)
def test_starts_at_the_same_moment_cannot_pass_the_limit_together(alice):
    results = _at_once(8, lambda: services.run_start(owner=alice, topic="tides"))

    started = [result for result in results if isinstance(result, Run)]
    refused = [result for result in results if isinstance(result, TooManyRuns)]
    assert (len(started), len(refused)) == (3, 5)
    assert Run.objects.filter(owner=alice).count() == 3


# --- Usage and ending ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_usage_rolls_the_cost_up_to_every_ancestor(tree_factory):
    root = tree_factory(children=("a", "b"), grandchildren=("x",))
    a = root.children.get(name="a")
    x = a.children.get()
    b = root.children.get(name="b")

    # The scripted model costs 1 USD per million input tokens, 2 per million output tokens.
    cost = services.usage_add(run_id=x.pk, input_tokens=1000, output_tokens=500, latency_ms=40)
    services.usage_add(run_id=b.pk, input_tokens=2000, output_tokens=0, latency_ms=40)

    assert cost == Decimal("0.002")
    runs = {run.pk: run for run in Run.objects.filter(root=root)}
    assert runs[x.pk].cost_usd == runs[x.pk].tree_cost_usd == Decimal("0.002")
    assert (runs[x.pk].steps, runs[x.pk].input_tokens, runs[x.pk].output_tokens) == (1, 1000, 500)
    assert runs[a.pk].cost_usd == 0
    assert runs[a.pk].tree_cost_usd == Decimal("0.002")
    assert runs[b.pk].tree_cost_usd == Decimal("0.002")
    assert runs[root.pk].cost_usd == 0
    assert runs[root.pk].tree_cost_usd == Decimal("0.004")
    call = LLMCall.objects.get(run=x)
    assert (call.parent_run_id, call.depth, call.model) == (a.pk, 2, "scripted")


@pytest.mark.django_db
def test_usage_reaches_the_root_in_deeper_trees(settings, run_factory, subagent_factory):
    settings.RESEARCH_MAX_SUBAGENT_DEPTH = 3
    root = run_factory()
    lineage = [root]
    for name in ("a", "b", "c"):
        lineage.append(subagent_factory(lineage[-1], name))

    services.usage_add(run_id=lineage[-1].pk, input_tokens=1000, output_tokens=0, latency_ms=1)

    costs = [Run.objects.get(pk=run.pk).tree_cost_usd for run in lineage]
    assert costs == [Decimal("0.001")] * 4


@pytest.mark.django_db
def test_a_finished_run_stays_finished(run_factory):
    root = run_factory()
    services.run_claim(run_id=root.pk)
    services.run_finish(run_id=root.pk, report="the report")

    services.run_finish(run_id=root.pk, error="late failure")
    services.run_set_state(run_id=root.pk, state="thinking")
    services.run_cancel(run=root)

    root.refresh_from_db()
    assert (root.status, root.state, root.report, root.error) == (
        "done",
        "ended",
        "the report",
        "",
    )
    assert not root.cancel_requested


@pytest.mark.django_db
def test_runs_fail_ends_children_before_parents(tree_factory):
    root = tree_factory(children=("a",), grandchildren=("x",))
    tree = list(Run.objects.filter(root=root).values_list("pk", flat=True))

    count = services.runs_fail(run_ids=tree, error=services.INTERRUPTED)

    assert count == 3
    ended = Run.objects.filter(root=root).order_by("finished_at", "id")
    assert [run.depth for run in ended] == [2, 1, 0]
    assert {run.error for run in ended} == {services.INTERRUPTED}


# --- Many agents of one tree writing at once ----------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_agents_of_one_tree_writing_at_once_never_deadlock(tree_factory):
    """Every write of a tree also bumps the root's event counter: a grandchild's model call
    (its row, then its ancestors') and its parent's state change (its row, then the root's)
    must take their locks in one order, or PostgreSQL kills one of them as a deadlock."""
    root = tree_factory(children=("a", "b"), grandchildren=("x",))
    tree = list(Run.objects.filter(root=root).order_by("depth", "id"))
    for run in tree:
        services.run_claim(run_id=run.pk)
    rounds = 10

    def calls_the_model(run_id: int) -> Callable[[], None]:
        def work() -> None:
            for _ in range(rounds):
                services.usage_add(run_id=run_id, input_tokens=10, output_tokens=10, latency_ms=1)

        return work

    def changes_state(run_id: int) -> Callable[[], None]:
        def work() -> None:
            for index in range(rounds):
                services.run_set_state(run_id=run_id, state="thinking", detail=str(index))

        return work

    works = [calls_the_model(run.pk) for run in tree] + [changes_state(run.pk) for run in tree]
    results = _at_once_each(works)

    assert [result for result in results if isinstance(result, BaseException)] == []
    root.refresh_from_db()
    # 10 + 10 tokens at 1 and 2 USD per million, by every agent of the tree, every round.
    assert root.tree_cost_usd == len(tree) * rounds * Decimal("0.00003")


def _at_once(count: int, work: Callable[[], object]) -> list[object]:
    return _at_once_each([work] * count)


def _at_once_each(works: list[Callable[[], object]]) -> list[object]:
    """Run each callable on its own thread, released together; their results or errors."""
    barrier = threading.Barrier(len(works))
    results: list[object] = [None] * len(works)

    def call(index: int) -> None:
        try:
            barrier.wait()
            results[index] = works[index]()
        except BaseException as error:
            results[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=call, args=(index,)) for index in range(len(works))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def _spawn_calls(*calls: tuple[tuple[str, str], ...]) -> list[services.SpawnCall]:
    """Spawn calls of one turn, each a tuple of (name, task) entries; one entry: not a batch."""
    return [
        services.SpawnCall(
            [services.Launch(name=name, reason="a part", task=task) for name, task in entries],
            batch=len(entries) > 1,
        )
        for entries in calls
    ]


def _announced(*runs: Run, seated: int = 2) -> list[tuple[str, int]]:
    """The events a turn's spawn announces, in order: each run created, then the claims of the
    first `seated`."""
    return [("run.created", run.pk) for run in runs] + [
        ("run.state", run.pk) for run in runs[:seated]
    ]


@pytest.mark.django_db
def test_the_spawns_of_one_turn_are_checked_in_order_and_recorded_together(run_factory):
    root = run_factory()
    turn = _spawn_calls(
        (("tides", "the history of tides and of tide tables"),),
        (("tides", "the physics of waves"),),  # a name an earlier call of the turn took
        (("copy", "the history of tides and tide tables"),),  # nearly its task
        (("moon", "the moon's pull on the sea"), ("sun", "the sun's pull on the sea")),
        (("wind", "winds over the sea"), ("wind", "winds over land")),  # a batch: none of it
    )

    outcomes = services.subagents_spawn_each(parent_id=root.pk, calls=turn)

    tides = Run.objects.get(parent=root, name="tides")
    assert [run.name for run in outcomes[0]] == ["tides"]
    assert outcomes[1].message.startswith(
        f'you already have a sub-agent named "tides" (run {tides.pk})'
    )
    assert outcomes[2].message == (
        f'refused: this task nearly repeats the task of your working sub-agent "tides" '
        f"(run {tides.pk}). Wait for its report, or give a different task."
    )
    assert [run.name for run in outcomes[3]] == ["moon", "sun"]
    assert outcomes[4].message.startswith('entry 2 ("wind"): you already have a sub-agent named')
    assert list(root.children.order_by("id").values_list("name", flat=True)) == [
        "tides",
        "moon",
        "sun",
    ]
    # One `run.created` event per child, numbered in a row, as one publication.
    children = list(root.children.order_by("id").values_list("pk", flat=True))
    created = [
        event
        for event in root.events.filter(type="run.created").order_by("seq")
        if event.payload["run"] != root.pk
    ]
    assert [event.payload["run"] for event in created] == children
    assert [event.seq for event in created] == list(range(created[0].seq, created[0].seq + 3))
    assert len({event.at for event in created}) == 1


@pytest.mark.django_db
def test_children_seated_at_their_spawn_start_working_in_its_transaction(run_factory):
    """The pool had a place and a slot for the first two: they are inserted working, as if
    claimed with the spawn, thinking, their claims announced right after the three
    `run.created` events; the third waits in the queue and claims its run itself when its
    thread gets a slot."""
    from django.test.utils import CaptureQueriesContext

    root = run_factory()
    worker = services.worker_register(claims_roots=False)
    turn = _spawn_calls(
        (("tides", "the tides of the North Sea"),),
        (("moon", "the moon's pull on the sea"), ("sun", "the sun's pull on the sea")),
    )

    with CaptureQueriesContext(connection) as captured:
        outcomes = services.subagents_spawn_each(
            parent_id=root.pk, calls=turn, seat=2, worker_id=worker.pk
        )

    tides, moon, sun = outcomes[0] + outcomes[1]
    assert [(run.status, run.state) for run in (tides, moon, sun)] == [
        ("working", "thinking"),
        ("working", "thinking"),
        ("queued", "queued"),
    ]
    assert tides.started_at is not None and sun.started_at is None
    assert tides.worker_id == moon.worker_id == worker.pk
    stored = {run.pk: run.status for run in root.children.all()}
    assert stored == {tides.pk: "working", moon.pk: "working", sun.pk: "queued"}
    events = [e for e in root.events.order_by("seq") if e.payload["run"] != root.pk]
    assert [(e.type, e.payload["run"]) for e in events] == _announced(tides, moon, sun)
    assert [e.seq for e in events] == list(range(events[0].seq, events[0].seq + 5))
    assert events[0].payload["data"]["status"] == "queued"  # created, then claimed
    assert events[3].payload["status"] == "working" and events[3].payload["started_at"]
    assert events[3].payload["started_at"] == iso(Run.objects.get(pk=tides.pk).started_at)
    assert list(tides.states.values_list("state", flat=True)) == ["queued", "thinking"]
    # With what a claim reads for their agents, as their threads start from these rows.
    assert (tides.owner_allows_subagents, tides.has_children) == (True, False)
    assert not tides.remote_servers_enabled
    # The seats cost no statement: the children go in working, no claim follows.
    assert not [q["sql"] for q in captured.captured_queries if "SET status = " in q["sql"]]
    root = run_factory(topic="the same turn, no seat")
    with CaptureQueriesContext(connection) as unseated:
        services.subagents_spawn_each(parent_id=root.pk, calls=turn)
    assert len(captured.captured_queries) == len(unseated.captured_queries)


@pytest.mark.django_db
def test_more_spawns_in_a_turn_cost_no_more_statements(run_factory):
    """The tree is locked, the parent's children read, the runs inserted and the events
    numbered once for the whole turn: five spawn calls cost what one costs."""
    from django.test.utils import CaptureQueriesContext

    statements = []
    for count in (1, 5):
        root = run_factory()
        facets = ["tides", "waves", "currents", "salinity", "reefs"][:count]
        turn = _spawn_calls(*[((facet, f"the {facet} of the North Sea"),) for facet in facets])
        with CaptureQueriesContext(connection) as captured:
            outcomes = services.subagents_spawn_each(parent_id=root.pk, calls=turn)
        assert all(isinstance(outcome, list) for outcome in outcomes)
        statements.append(len(captured.captured_queries))
        services.run_finish(run_id=root.pk, error="done with it")

    assert statements[1] == statements[0]


@pytest.mark.django_db
def test_a_spawn_in_the_writers_batch_reads_once_and_numbers_its_events_with_its_insert(
    run_factory,
):
    """The writer's batch locks the trees of its spawns before they run (step_batch.
    write_parts): a spawn then reads its parent, its children and its tree's size in one
    statement, and its INSERT takes the tree's event numbers too, where alone it locks and
    reads, inserts, then numbers. Its children and their events are what they were."""
    from django.db import transaction
    from django.test.utils import CaptureQueriesContext

    from research.services.step_batch import Action, write_parts
    from research.services.subagents import _spawn_each
    from research.sql import inserts_deferred

    root = run_factory()
    worker = services.worker_register(claims_roots=False)
    turn = _spawn_calls(
        (("tides", "the tides of the North Sea"),),
        (("moon", "the moon's pull on the sea"), ("sun", "the sun's pull on the sea")),
    )
    before = Run.objects.get(pk=root.pk).event_seq

    def act():
        return _spawn_each(parent_id=root.pk, calls=turn, seat=2, worker_id=worker.pk, locked=True)

    with CaptureQueriesContext(connection) as captured, transaction.atomic(), inserts_deferred():
        (outcomes,) = write_parts([Action(root.pk, act)])

    # The test's own transaction makes the batch's a savepoint.
    statements = [q["sql"] for q in captured.captured_queries if "SAVEPOINT" not in q["sql"]]
    lock, reads, insert, rows = statements
    assert "FOR NO KEY UPDATE" in lock and str(root.pk) in lock
    assert reads.startswith("SELECT p.") and "COUNT(*)" in reads
    assert insert.startswith("WITH reserved AS (UPDATE") and "INSERT INTO" in insert
    assert not [sql for sql in statements if sql.startswith("UPDATE")]  # no numbering apart
    tides, moon, sun = outcomes[0] + outcomes[1]
    assert [(run.status, run.state) for run in (tides, moon, sun)] == [
        ("working", "thinking"),
        ("working", "thinking"),
        ("queued", "queued"),
    ]
    events = list(root.events.filter(seq__gt=before).order_by("seq"))
    assert [(e.type, e.payload["run"]) for e in events] == _announced(tides, moon, sun)
    assert [e.seq for e in events] == list(range(before + 1, before + 6))
    assert Run.objects.get(pk=root.pk).event_seq == before + 5
