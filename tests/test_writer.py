"""Group commit (research.services.writer): the records of many agents in one transaction,
the same rows and events as one by one, and a bad record failing only its own agent; an
agent's spawn in the batch of the step that made it."""

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from django.db import OperationalError, connection, transaction

from agents.runtime import resilience
from research import selectors, services
from research.events import tree_lock
from research.models import Event, LLMCall, Run, RunState, Step
from research.services import Launch, NextState, SpawnCall, step_writer
from tests.conftest import statements_waiting_on_a_lock, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def writer():
    owner = object()
    step_writer.start(owner)
    yield step_writer
    step_writer.stop(owner)


@pytest.fixture
def agents(tree_factory, settings):
    """Two trees of a root and two children each, all working; their facts."""
    settings.RESEARCH_MAX_WORKING_ROOTS = 10
    facts = []
    for index in range(2):
        root = tree_factory(topic=f"tree {index}", children=("a", "b"), grandchildren=())
        for run in [root, *root.children.all()]:
            services.run_claim(run_id=run.pk)
            facts.append(selectors.run_facts(run=Run.objects.get(pk=run.pk)))
    return facts


def _model_call(facts, *, wait: bool = True):
    return services.model_call_record(
        facts=facts,
        input_tokens=100,
        output_tokens=20,
        latency_ms=1,
        step={"kind": "model", "input": {"tool_calls": [["web_search", "{}"]]}, "output": ""},
        next_state=NextState("searching", "a query"),
        wait=wait,
    )


def _tool_call(facts, *, wait: bool = True, query: object = "results"):
    return services.tool_call_record(
        facts=facts,
        step={"kind": "tool", "tool": "web_search", "input": {"q": query}, "output": "results"},
        next_state=NextState("thinking"),
        wait=wait,
    )


def _one_step(facts, output: object = "results") -> None:
    _model_call(facts)
    _tool_call(facts, query=output)


def held(writer) -> Callable[[], None]:
    """Hold the writer busy with a record written alone: what comes meanwhile queues. Call
    what it returns to let it go."""
    gate = threading.Event()
    writing = threading.Event()

    def busy_record() -> None:
        writing.set()
        gate.wait()

    busy = threading.Thread(target=writer.write, args=(None, busy_record))
    busy.start()
    # Not "the queue is empty": it is before the busy record is handed over, too.
    if not writing.wait(20):
        gate.set()  # the writer must not stay held for the tests that follow
        raise AssertionError("the writer never took the busy record")

    def release() -> None:
        gate.set()
        busy.join(20)

    return release


def _together(writer, calls) -> dict[int, BaseException]:
    """Run each call in its own thread while the writer is held busy, so that all their first
    records queue up and go in one batch; the errors they raised, by index."""
    release = held(writer)
    errors: dict[int, BaseException] = {}

    def run(index, call) -> None:
        try:
            call()
        except BaseException as error:
            errors[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=item) for item in enumerate(calls)]
    for thread in threads:
        thread.start()
    wait_for(lambda: writer.queued() == len(calls), message="the records never queued")
    writer.largest = 0  # forget the batches of earlier tests
    release()
    for thread in threads:
        thread.join(20)
    # The first records went together: the next batch took every record queued meanwhile.
    # (Not a count of batches: how the later records group depends on the machine's load.)
    assert writer.largest >= len(calls)
    return errors


def test_a_batch_writes_every_agents_records_with_gapless_ordered_events(writer, agents):
    batches, retried = writer.batches, writer.retried
    errors = _together(writer, [lambda facts=facts: _one_step(facts) for facts in agents])

    assert errors == {}
    assert writer.batches - batches < 2 * len(agents)  # fewer commits than records
    assert writer.retried == retried  # each batch went in one transaction
    for facts in agents:
        run = Run.objects.get(pk=facts.run_id)
        assert (run.steps, run.input_tokens, run.state) == (1, 100, "thinking")
        assert LLMCall.objects.filter(run_id=facts.run_id).count() == 1
        assert Step.objects.filter(run_id=facts.run_id).count() == 2
    for root_id in {facts.root_id for facts in agents}:
        root = Run.objects.get(pk=root_id)
        assert root.tree_input_tokens == 300  # the root and its two children
        events = list(Event.objects.filter(root_id=root_id).order_by("seq"))
        assert [event.seq for event in events] == list(range(1, len(events) + 1))
        assert [event.payload["seq"] for event in events] == [event.seq for event in events]
        # Each usage event carries the counters as they were after its own record.
        usages = [event.payload for event in events if event.type == "run.usage"]
        assert [usage["root_tree_input_tokens"] for usage in usages] == [100, 200, 300]
        assert {(usage["steps"], usage["input_tokens"]) for usage in usages} == {(1, 100)}
        children = [usage for usage in usages if usage["run"] != root_id]
        assert all(usage["tree_cost_usd"] == usage["cost_usd"] for usage in children)


def test_a_step_handed_over_within_the_linger_commits_once(writer, agents, settings):
    """An agent's model call and its tool's record, handed over 50 ms apart while the writer
    lingers up to a second: one batch, one commit (the writer before the linger wrote the
    first alone)."""
    settings.RESEARCH_WRITER_LINGER_MS = 1000
    facts = agents[0]
    before = writer.batches
    first = _model_call(facts, wait=False)
    threading.Event().wait(0.05)
    second = _tool_call(facts, wait=False)
    second.wait()
    first.wait()

    assert writer.batches - before == 1
    assert Step.objects.filter(run_id=facts.run_id).count() == 2
    assert Run.objects.get(pk=facts.run_id).state == "thinking"


def test_a_wait_on_a_record_and_the_writers_stop_never_wait_out_the_linger(agents, settings):
    settings.RESEARCH_WRITER_LINGER_MS = 600_000  # ten minutes
    owner = object()
    step_writer.start(owner)
    try:
        waited = _model_call(agents[0], wait=False)
        waiter = threading.Thread(target=waited.wait)
        waiter.start()
        waiter.join(10)
        assert not waiter.is_alive(), "a wait on a record waited for the batch to fill"
        assert LLMCall.objects.filter(run_id=agents[0].run_id).count() == 1
        unwaited = _model_call(agents[1], wait=False)
    finally:
        step_writer.stop(owner, timeout=10)
    assert unwaited.done.is_set(), "the writer's stop waited for the batch to fill"
    assert LLMCall.objects.filter(run_id=agents[1].run_id).count() == 1


def test_a_bad_record_fails_only_its_agent_with_the_error_it_raises_alone(writer, agents):
    bad = agents[1]
    with pytest.raises(TypeError) as alone, transaction.atomic():  # inline, as before
        _one_step(bad, output=object())

    errors = _together(
        writer,
        [
            lambda facts=facts: _one_step(facts, output=object() if facts is bad else "fine")
            for facts in agents
        ],
    )

    assert writer.retried >= 1
    assert list(errors) == [1]
    assert type(errors[1]) is TypeError and str(errors[1]) == str(alone.value)
    for facts in agents:
        assert Run.objects.get(pk=facts.run_id).steps == 1
        tools = Step.objects.filter(run_id=facts.run_id, kind="tool").count()
        assert tools == (0 if facts is bad else 1)


def test_a_record_of_a_run_ended_meanwhile_is_kept_without_its_state(writer, agents):
    ended = agents[2]
    services.run_finish(run_id=ended.run_id, error="interrupted: the server stopped")

    errors = _together(writer, [lambda facts=facts: _one_step(facts) for facts in agents])

    assert errors == {}
    run = Run.objects.get(pk=ended.run_id)
    assert (run.status, run.state, run.input_tokens) == ("failed", "ended", 100)
    assert Step.objects.filter(run_id=ended.run_id, kind="tool").exists()
    seqs = list(Event.objects.filter(root_id=ended.root_id).values_list("seq", flat=True))
    assert sorted(seqs) == list(range(1, len(seqs) + 1))


def test_a_state_handed_over_follows_its_agents_records_and_skips_a_run_ended_meanwhile(
    writer, agents
):
    ended = agents[2]
    services.run_finish(run_id=ended.run_id, error="interrupted: the server stopped")

    def step_then_show(facts) -> None:
        _one_step(facts)
        services.state_record(facts=facts, state="writing", detail="the report", wait=True)

    errors = _together(writer, [lambda facts=facts: step_then_show(facts) for facts in agents])

    assert errors == {}
    for facts in agents:
        run = Run.objects.get(pk=facts.run_id)
        timeline = list(
            RunState.objects.filter(run_id=facts.run_id)
            .order_by("id")
            .values_list("state", flat=True)
        )
        events = Event.objects.filter(root_id=facts.root_id, payload__run=facts.run_id)
        last = events.order_by("seq").last().payload
        if facts is ended:
            assert (run.state, "writing" in timeline) == ("ended", False)
            assert not events.filter(type="run.state", payload__state="writing").exists()
        else:
            assert (run.state, timeline[-2:]) == ("writing", ["thinking", "writing"])
            assert (last["type"], last["state"], last["detail"]) == (
                "run.state",
                "writing",
                "the report",
            )


def test_a_tools_state_rides_on_its_calls_usage_event_in_their_batch(writer, agents):
    """In one batch: a model call and its two tools (the first moving the agent on to a
    second group, the second to its next call) send one run.usage, carrying the last state;
    a tool whose call went in an earlier batch sends its own run.state, and so does one
    after a state recorded between it and its call. The timeline keeps every state."""
    rides, earlier, between = agents[0], agents[1], agents[2]
    claimed = {facts.run_id: Run.objects.get(pk=facts.root_id).event_seq for facts in agents}
    _model_call(earlier)  # committed before the batch
    release = held(writer)
    handed = [
        _model_call(rides, wait=False),
        services.tool_call_record(
            facts=rides,
            step={"kind": "tool", "tool": "web_search", "input": {}, "output": "results"},
            next_state=NextState("reading", "a page"),
            wait=False,
        ),
        _tool_call(rides, wait=False),
        _tool_call(earlier, wait=False),
        _model_call(between, wait=False),
        services.state_record(facts=between, state="writing", detail="a draft", wait=False),
        _tool_call(between, wait=False),
    ]
    release()
    for record in handed:
        record.wait()
    assert writer.queued() == 0

    def moves(facts) -> list[tuple[str, str | None, str | None]]:
        events = Event.objects.filter(root_id=facts.root_id, payload__run=facts.run_id)
        events = events.filter(seq__gt=claimed[facts.run_id])  # after their claims' states
        payloads = [event.payload for event in events.order_by("seq")]
        return [
            (payload["type"], payload.get("state"), payload.get("detail"))
            for payload in payloads
            if payload["type"] in ("run.state", "run.usage")
        ]

    def timeline(facts) -> list[str]:
        states = RunState.objects.filter(run_id=facts.run_id).order_by("id")
        return list(states.values_list("state", flat=True))[-3:]

    assert moves(rides) == [("run.usage", "thinking", "")]
    assert timeline(rides) == ["searching", "reading", "thinking"]
    assert moves(earlier) == [("run.usage", "searching", "a query"), ("run.state", "thinking", "")]
    assert moves(between) == [
        ("run.usage", "searching", "a query"),
        ("run.state", "writing", "a draft"),
        ("run.state", "thinking", ""),
    ]
    assert {Run.objects.get(pk=facts.run_id).state for facts in agents[:3]} == {"thinking"}
    for root_id in {facts.root_id for facts in agents}:
        seqs = Event.objects.filter(root_id=root_id).order_by("seq").values_list("seq", flat=True)
        assert list(seqs) == list(range(1, len(seqs) + 1))
        assert Run.objects.get(pk=root_id).event_seq == len(seqs)


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_batch_locks_every_trees_root_before_any_sub_agents_row(writer, agents):
    """A batch's one UPDATE takes its rows' locks roots first (the trees' locks), as every
    other write of a tree does: waiting for one tree's lock, it holds no sub-agent's row,
    so a service holding that lock and then writing a sub-agent (a cancel) never deadlocks
    with it. The batch then writes every record."""
    root_a, child_a, _, root_b, child_b, _ = agents
    with tree_held(root_b.root_id):
        release = held(writer)
        records = [_model_call(facts, wait=False) for facts in (child_a, child_b)]
        release()  # both go in the next batch, which waits for tree B's lock
        wait_for(
            lambda: statements_waiting_on_a_lock("WITH locked AS") == 1,
            message="the batch never waited for tree B",
        )

        assert _locked_elsewhere([root_a.run_id]), "tree A's lock comes first"
        assert not _locked_elsewhere([child_a.run_id, child_b.run_id])
    for record in records:
        record.wait()
    for facts in (child_a, child_b):
        assert Run.objects.get(pk=facts.run_id).steps == 1
        assert Run.objects.get(pk=facts.root_id).tree_input_tokens == 100


@contextmanager
def tree_held(root_id: int, *, then: int | None = None) -> Iterator[dict]:
    """Another transaction holds tree `root_id`'s lock for the block; with `then`, it takes
    that tree's lock too as the block ends, before it commits. Yields its outcome (_in_thread),
    complete once the block is over."""
    holding, let_go = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic():
            tree_lock(root_id=root_id)
            holding.set()
            let_go.wait(20)
            if then is not None:
                tree_lock(root_id=then)

    holder, outcome = _in_thread(hold)
    try:
        assert holding.wait(20), outcome
        yield outcome
    finally:
        let_go.set()
        holder.join(30)


def _locked_elsewhere(run_ids: list[int]) -> bool:
    """Whether another transaction holds a lock on any of these runs' rows."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM {Run._meta.db_table} WHERE id = ANY(%s) FOR NO KEY UPDATE NOWAIT",
                [run_ids],
            )
    except OperationalError:
        return True
    return False


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_lost_connection_is_written_again_through_a_fresh_one(writer, agents):
    from tests.test_resilience import terminate_backends

    facts = agents[0]
    _one_step(facts)
    connection.ensure_connection()
    assert terminate_backends(sparing=connection.connection.info.backend_pid) >= 1

    resilience.retrying("a step", lambda: _one_step(facts))

    assert Run.objects.get(pk=facts.run_id).steps == 2
    assert LLMCall.objects.filter(run_id=facts.run_id).count() == 2


def test_the_writer_stops_with_its_last_user_closes_its_connection_and_starts_again(agents):
    first, second = object(), object()
    step_writer.start(first)
    step_writer.start(second)
    thread = step_writer.thread
    _one_step(agents[0])
    step_writer.stop(first)
    assert step_writer.thread is thread and thread.is_alive()
    step_writer.stop(second)
    assert step_writer.thread is None and not thread.is_alive()
    if connection.vendor == "postgresql":
        wait_for(lambda: _pool_in_use() <= 1, timeout=5, message="the writer kept a connection")

    step_writer.start(first)
    try:
        assert step_writer.thread is not thread
        _one_step(agents[0])
    finally:
        step_writer.stop(first)
    assert Run.objects.get(pk=agents[0].run_id).steps == 2


def _pool_in_use() -> int:
    connection.ensure_connection()
    stats = connection.pool.get_stats()
    return stats["pool_size"] - stats["pool_available"]


@pytest.mark.parametrize("form", ["one statement", "pipelined"])
def test_deferred_rows_on_a_connection_the_server_ends_fail_as_a_lost_connection(agents, form):
    """The server ends the connection under a batch's deferred rows: in one statement (JSON),
    or, for a value JSON cannot carry, while one INSERT per table waits in the pipeline, whose
    exit raises psycopg's own error. Either way it reaches the agents as Django's
    OperationalError, which resilience.retrying retries on a fresh connection."""
    from django.db import OperationalError
    from django.db.models import JSONField, Value
    from django.utils import timezone

    from research.models import RunState
    from research.sql import Insert, drop_broken_connection, inserts_deferred

    if connection.vendor != "postgresql":
        pytest.skip("the one statement and the pipeline are PostgreSQL's")
    run_id = agents[0].run_id
    steps = Insert(Step, ["run", "kind", "tool", "input", "output", "is_error", "at"])
    states = Insert(RunState, ["run", "state", "detail", "at"])

    connection.ensure_connection()
    mine = connection.connection.info.backend_pid

    def end_around_the_last(execute, sql, params, many, context):
        if form == "one statement":
            end_backend(mine)  # only this connection: the pool's others stay
            return execute(sql, params, many, context)
        result = execute(sql, params, many, context)  # queued, not yet answered
        if RunState._meta.db_table in sql:
            end_backend(mine)
        return result

    step_input = {} if form == "one statement" else Value(None, JSONField())  # JSON's null
    with (
        pytest.raises(OperationalError),
        connection.execute_wrapper(end_around_the_last),
        inserts_deferred(),
    ):
        steps.row(run_id, "tool", "list_siblings", step_input, "", False, timezone.now())
        states.row(run_id, "thinking", "", timezone.now())
    drop_broken_connection()

    assert Step.objects.filter(run_id=run_id, tool="list_siblings").count() == 0


def end_backend(pid: int) -> None:
    """pg_terminate_backend one connection, from a connection of its own."""
    import psycopg

    db = connection.settings_dict
    with psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"], autocommit=True
    ) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


# --- An agent's spawn in the batch (step_batch.Action) ----------------------------------------


def _spawn(parent_id: int, root_id: int, name: str) -> list:
    call = SpawnCall([Launch(name=name, reason="one facet", task=f"the {name} facet")], batch=False)
    return services.subagents_spawn_each(parent_id=parent_id, calls=[call], root_id=root_id)


def _in_thread(call) -> tuple[threading.Thread, dict]:
    """Run `call` in a thread of its own, as an agent does; what it returned or raised."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["returned"] = call()
        except BaseException as error:
            outcome["raised"] = error
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_a_spawn_commits_in_the_batch_of_the_step_that_made_it(writer, agents):
    root = agents[0]
    release = held(writer)
    batches, records = writer.batches, writer.records
    step = _model_call(root, wait=False)
    thread, outcome = _in_thread(lambda: _spawn(root.run_id, root.root_id, "facet"))
    wait_for(lambda: writer.queued() == 2, message="the step and the spawn never queued")
    release()
    thread.join(20)
    step.wait()

    assert (writer.batches - batches, writer.records - records) == (1, 2), "not one commit"
    ((child,),) = outcome["returned"]
    assert Run.objects.get(pk=child.pk).parent_id == root.run_id
    events = list(Event.objects.filter(root_id=root.root_id).order_by("seq"))
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    types = [(event.type, event.payload["run"]) for event in events][-2:]
    assert types == [("run.usage", root.run_id), ("run.created", child.pk)]


def test_a_spawn_whose_events_fail_to_push_after_the_commit_returns_its_children(
    writer, agents, monkeypatch
):
    """The batch committed, then handing its events to the pushes raised (a server loop
    closing): the records are written, once, and each waiter gets what its record returned
    (the spawn its children), not nothing."""
    from research.events import store

    root = agents[0]

    def failing(root_id, payloads):
        raise RuntimeError("the server's loop is closed")

    monkeypatch.setattr(store, "broadcast", failing)
    batches, retried = writer.batches, writer.retried
    thread, outcome = _in_thread(lambda: _spawn(root.run_id, root.root_id, "pushless"))
    thread.join(20)

    assert "raised" not in outcome, outcome
    ((child,),) = outcome["returned"]
    assert Run.objects.get(pk=child.pk).name == "pushless"
    assert (writer.batches - batches, writer.retried - retried) == (1, 0)
    assert Run.objects.filter(parent_id=root.run_id, name="pushless").count() == 1


def test_a_spawn_that_raises_in_a_batch_leaves_the_records_written(writer, agents):
    """Its parent is gone: the batch rolls back, its records are written alone, and the spawn,
    alone too, raises what it raised before group commit."""
    root = agents[0]
    release = held(writer)
    retried = writer.retried
    step = _model_call(root, wait=False)
    thread, outcome = _in_thread(lambda: _spawn(10**9, root.root_id, "orphan"))
    wait_for(lambda: writer.queued() == 2, message="the step and the spawn never queued")
    release()
    thread.join(20)
    step.wait()

    assert isinstance(outcome.get("raised"), Run.DoesNotExist), outcome
    assert writer.retried == retried + 1
    assert LLMCall.objects.filter(run_id=root.run_id).count() == 1
    assert not Run.objects.filter(name="orphan").exists()


def test_a_verifier_behind_a_draft_that_failed_is_not_spawned(writer, agents):
    """A root's verifier goes in the batch of its draft's record, `after` it: when that
    record fails (here a value no column takes), the batch is written record by record, the
    draft's record fails alone and the verifier is not written at all; its spawn raises the
    draft's error, which the review reports (the draft is kept, unverified)."""
    root = agents[0]
    release = held(writer)
    draft = _tool_call(root, wait=False, query=object())  # a record that raises

    def spawn() -> Run:
        return services.verifier_spawn(
            parent_id=root.run_id,
            name="verifier",
            reason="checks the draft",
            task="check the draft",
            kind="verifier",
            root_id=root.root_id,
            after=(draft,),
        )

    thread, outcome = _in_thread(spawn)
    wait_for(lambda: writer.queued() == 2, message="the draft and the spawn never queued")
    release()
    thread.join(20)

    with pytest.raises(TypeError):
        draft.wait()
    assert isinstance(outcome.get("raised"), TypeError), outcome
    assert not Run.objects.filter(parent_id=root.run_id, name="verifier").exists()


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_spawns_tree_is_locked_with_the_batchs_rows_in_their_order(writer, agents):
    """A batch with a record of tree A and a spawn in tree B locks both roots in its UPDATE,
    in id order, before the spawn locks B again: waiting for B, it holds no lock it took out
    of that order (a writer of another process takes them in the same order)."""
    root_a, child_a, _, root_b, _, _ = agents
    with tree_held(root_b.root_id):
        release = held(writer)
        step = _model_call(child_a, wait=False)
        spawner, outcome = _in_thread(lambda: _spawn(root_b.run_id, root_b.root_id, "late"))
        wait_for(lambda: writer.queued() == 2, message="the step and the spawn never queued")
        release()
        wait_for(
            lambda: statements_waiting_on_a_lock("WITH locked AS") == 1,
            message="the batch's UPDATE never waited for tree B",
        )
        assert _locked_elsewhere([root_a.run_id]), "tree A's lock comes first"
    spawner.join(20)
    step.wait()
    ((child,),) = outcome["returned"]
    assert Run.objects.get(pk=child.pk).root_id == root_b.root_id
    assert Run.objects.get(pk=child_a.run_id).steps == 1


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_spawn_whose_batch_lost_its_commit_is_never_written_again(writer, agents):
    """The connection dies under the COMMIT of a batch holding a step and a spawn: the commit
    may have gone through, so the spawn fails with the error (its parent then reads the
    children it may have), where the step's record is written again."""
    from django.db import connections

    from research.services.step_batch import Action
    from tests.test_resilience import terminate_backend

    root = agents[0]
    ran = []

    def act() -> str:  # in the writer's thread: `connection` is the batch's
        ran.append(True)
        db = connections["default"]  # the writer thread's, not the proxy
        pid = db.connection.info.backend_pid

        def commit_after_the_backend_ends() -> None:
            del db._commit  # once
            terminate_backend(pid)
            type(db)._commit(db)

        db._commit = commit_after_the_backend_ends
        return "spawned"

    release = held(writer)
    step = _model_call(root, wait=False)
    spawn = writer.hand_over(Action(root.root_id, act), act)
    release()

    with pytest.raises(OperationalError):
        spawn.wait()
    step.wait()
    assert ran == [True], "the spawn ran again after a commit that may have gone through"
    assert LLMCall.objects.filter(run_id=root.run_id).count() == 1


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_batch_of_spawns_alone_locks_their_roots_in_id_order(writer, agents):
    """Two spawns whose steps went in an earlier batch, handed over the later tree first: the
    batch takes their roots in id order, as another process's writer holding tree A and
    about to take tree B does, so neither waits for the other (no deadlock, no retry)."""
    root_a, _, _, root_b, _, _ = agents
    assert root_a.root_id < root_b.root_id
    release = held(writer)
    later, later_outcome = _in_thread(lambda: _spawn(root_b.run_id, root_b.root_id, "bee"))
    wait_for(lambda: writer.queued() == 1, message="the first spawn never queued")
    earlier, earlier_outcome = _in_thread(lambda: _spawn(root_a.run_id, root_a.root_id, "ay"))
    wait_for(lambda: writer.queued() == 2, message="the second spawn never queued")
    retried = writer.retried
    # Another process's writer: it holds tree A, then takes tree B before it commits.
    with tree_held(root_a.root_id, then=root_b.root_id) as other:
        release()
        wait_for(lambda: statements_waiting_on_a_lock() == 1, message="the batch never waited")
    # With tree B taken first by the batch, the other's taking it would have deadlocked.
    for thread in (later, earlier):
        thread.join(30)

    assert "raised" not in other and writer.retried == retried, other
    ((bee,),), ((ay,),) = later_outcome["returned"], earlier_outcome["returned"]
    assert (bee.root_id, ay.root_id) == (root_b.root_id, root_a.root_id)


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_spawn_in_a_batch_whose_commit_refused_a_key_is_written_again_alone(writer, agents):
    """Another part of its batch breaks a key checked at the COMMIT: the connection is sound
    and the batch surely rolled back, so the spawn is written again alone, and succeeds."""
    from research.models import RunState
    from research.services.step_batch import Action

    root, _, _, other_root, _, _ = agents

    def breaks_a_key() -> None:  # a state of no run: refused at the COMMIT (deferred key)
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {RunState._meta.db_table} (run_id, state, detail, at) "
                "VALUES (%s, 'thinking', '', now())",
                [10**9],
            )

    release = held(writer)
    retried = writer.retried
    spawn, outcome = _in_thread(lambda: _spawn(root.run_id, root.root_id, "innocent"))
    wait_for(lambda: writer.queued() == 1, message="the spawn never queued")
    bad = writer.hand_over(Action(other_root.root_id, breaks_a_key), lambda: None)
    release()
    spawn.join(20)
    bad.wait()

    assert writer.retried == retried + 1
    ((child,),) = outcome["returned"]
    assert Run.objects.filter(pk=child.pk, name="innocent").exists()
