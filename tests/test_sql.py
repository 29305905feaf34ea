"""Statements built once (research.sql): many rows in one INSERT come back from the database
exactly as the ORM writes them, whichever form the INSERT takes on PostgreSQL (a row per
VALUES group, one array per column past psycopg's cached size, or several tables' rows in one
statement as JSON)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import JSONField, Value
from django.test.utils import CaptureQueriesContext

from research.models import LLMCall, Run, RunState, Step
from research.models_checkpoints import Checkpoint
from research.services.steps import step_inserts
from research.sql import PSYCOPG_CACHED_PARAMS, Insert, inserts_deferred

pytestmark = pytest.mark.django_db

# Texts a hand-made array literal would get wrong: quotes, backslashes, braces, commas, the
# word NULL, an empty string, spaces at the ends, other scripts, a newline.
AWKWARD = [
    'say "hi"',
    "back\\slash",
    "{braces}",
    "a, b",
    "NULL",
    "",
    "  padded ",
    "é 漢字 🙂",
    "a\nb",
]


# The step writer's rows, as it writes them (research.services.steps).
WRITER = step_inserts()


def _steps(run_id: int, count: int) -> list[tuple]:
    at = datetime(2026, 12, 5, 6, 0, tzinfo=UTC)
    return [
        (
            run_id,
            "tool" if index % 2 else "model",
            "web_search" if index % 2 else "",
            {"query": AWKWARD[index % len(AWKWARD)], "nested": [[index, None], {"k": "v"}]},
            AWKWARD[(index + 3) % len(AWKWARD)],
            index % 3 == 0,
            at + timedelta(microseconds=index),
        )
        for index in range(count)
    ]


def _read_steps(run_id: int) -> list[tuple]:
    """The run's steps in the order of their ids: the order they were given."""
    fields = ("run_id", "kind", "tool", "input", "output", "is_error", "at")
    return list(Step.objects.filter(run_id=run_id).order_by("id").values_list(*fields))


@pytest.mark.parametrize("count", [1, 7, 40])
def test_rows_read_back_as_the_orm_wrote_them_whatever_the_form(run_factory, count):
    ours, theirs = run_factory(topic="ours"), run_factory(topic="theirs")
    insert = Insert(Step, ["run", "kind", "tool", "input", "output", "is_error", "at"])
    one_text = count * len(insert.fields) > PSYCOPG_CACHED_PARAMS

    with CaptureQueriesContext(connection) as queries:
        insert.rows(_steps(ours.pk, count))
    Step.objects.bulk_create(
        Step(run_id=r, kind=k, tool=t, input=i, output=o, is_error=e, at=a)
        for r, k, t, i, o, e, a in _steps(theirs.pk, count)
    )

    assert len(queries) == 1
    assert _as_json(queries[0]) == (one_text and connection.vendor == "postgresql")
    mine, orm = _read_steps(ours.pk), _read_steps(theirs.pk)
    assert len(mine) == count
    # The same values as the ORM's rows (whose `at` is its own: auto_now_add)...
    assert [row[1:6] for row in mine] == [row[1:6] for row in orm]
    # ... in the order given, with the times given, to the microsecond.
    assert [row[6] for row in mine] == [row[6] for row in _steps(ours.pk, count)]


def _sub_agents(parent: Run, topic: str, count: int) -> list[Run]:
    """Unsaved sub-agents of `parent` whose every kind of field holds an awkward value."""
    return [
        Run(
            owner_id=parent.owner_id,
            parent_id=parent.pk,
            root_id=parent.root_id,
            depth=1,
            name=f"{topic}-{index}",
            reason=AWKWARD[index % len(AWKWARD)],
            topic=topic,
            model=parent.model,
            tools=None if index % 2 else ["web_search", AWKWARD[(index + 1) % len(AWKWARD)]],
            clarification={"asked": [[index, None]], "q": AWKWARD[index % len(AWKWARD)]},
            max_steps=index + 1,
            cost_usd=Decimal("0.00000001") * index,
            paused_seconds=index / 3,
            worker_id=None,
        )
        for index in range(count)
    ]


@pytest.mark.parametrize("count", [1, 5])
def test_created_instances_read_back_as_bulk_create_wrote_them(run_factory, count):
    """The spawn's INSERT (Insert.create): every field as the ORM's bulk_create stores it,
    the rows in the order given, each instance given its id, whatever the INSERT's form."""
    parent = run_factory()
    ours, theirs = _sub_agents(parent, "ours", count), _sub_agents(parent, "theirs", count)
    insert = Insert.every(Run)
    one_text = count * len(insert.fields) > PSYCOPG_CACHED_PARAMS

    with CaptureQueriesContext(connection) as queries:
        insert.create(ours)
    Run.objects.bulk_create(theirs)

    assert len(queries) == 1
    assert _as_json(queries[0]) == (one_text and connection.vendor == "postgresql")
    assert [run.name for run in Run.objects.filter(topic="ours").order_by("id")] == [
        f"ours-{index}" for index in range(count)
    ]
    skipped = {"id", "name", "topic", "created_at"}
    names = [f.attname for f in Run._meta.concrete_fields if f.name not in skipped]
    for mine, orm in zip(ours, theirs, strict=True):
        assert not mine._state.adding and mine._state.db == "default"
        stored = Run.objects.get(pk=mine.pk)  # the id it was given is its own row's
        assert stored.name == mine.name
        assert stored.created_at == mine.created_at  # stamped as it was saved
        assert [getattr(stored, name) for name in names] == [
            getattr(Run.objects.get(pk=orm.pk), name) for name in names
        ]


def test_an_instance_with_a_key_is_refused_and_nothing_is_written(run_factory):
    parent = run_factory()
    (run,) = _sub_agents(parent, "keyed", 1)
    run.pk = 10**9

    with pytest.raises(ValueError, match="no key"):
        Insert.every(Run).create([run])
    assert not Run.objects.filter(topic="keyed").exists()


def test_the_team_reads_read_what_the_orm_reads(run_factory, subagent_factory):
    """research.selectors.team's statements built once: the same rows, in the same order,
    with the same fields loaded as the ORM queries they replaced."""
    from research import services
    from research.models import ACTIVE_STATUSES
    from research.selectors import team

    root = run_factory()
    a, b, c = (subagent_factory(root, name) for name in ("a", "b", "c"))
    services.run_finish(run_id=c.pk, report="c's report")
    services.run_finish(run_id=a.pk, error="a failed")
    ids = [c.pk, a.pk, b.pk]

    def same(mine: list[Run], orm: list[Run]) -> None:
        assert [(r.pk, r.get_deferred_fields()) for r in mine] == [
            (r.pk, r.get_deferred_fields()) for r in orm
        ]
        loaded = [f.attname for f in Run._meta.concrete_fields]
        for ours, theirs in zip(mine, orm, strict=True):
            assert [ours.__dict__.get(n) for n in loaded] == [
                theirs.__dict__.get(n) for n in loaded
            ]

    same(team.runs_by_ids(run_ids=ids), list(Run.objects.filter(pk__in=ids).order_by("id")))
    same(
        team.ended_among(run_ids=ids),
        list(
            Run.objects.filter(pk__in=ids)
            .exclude(status__in=ACTIVE_STATUSES)
            .only("pk", "name", "status", "report", "error")
            .order_by("finished_at", "id")
        ),
    )
    assert [r.pk for r in team.ended_among(run_ids=ids)] == [c.pk, a.pk]  # as they ended
    same(
        team.siblings_of(run_id=b.pk, parent_id=root.pk),
        list(
            Run.objects.filter(parent_id=root.pk)
            .exclude(pk=b.pk)
            .only("pk", "name", "reason", "status")
            .order_by("id")
        ),
    )
    assert team.siblings_of(run_id=root.pk, parent_id=None) == []  # a root has none
    same([team.run_by_id(run_id=a.pk)], [Run.objects.get(pk=a.pk)])
    with pytest.raises(Run.DoesNotExist):
        team.run_by_id(run_id=10**9)
    assert team.tree_cost(root_id=root.pk) == Run.objects.get(pk=root.pk).tree_cost_usd
    # A spawn's one read: the children with their tasks, and the tree's size, ended included.
    children, size = team.children_and_tree_size(run_id=root.pk, root_id=root.pk)
    assert [(child.pk, child.name, child.status, task) for child, task in children] == list(
        Run.objects.filter(parent_id=root.pk)
        .order_by("id")
        .values_list("pk", "name", "status", "topic")
    )
    assert size == Run.objects.filter(root_id=root.pk, parent_id__isnull=False).count() == 3
    assert team.children_and_tree_size(run_id=a.pk, root_id=root.pk) == ([], 3)  # none of its own


def test_a_spawn_under_its_trees_lock_reads_in_one_statement_what_it_reads_in_two(
    run_factory, subagent_factory
):
    """locks.spawn_reads, for a spawn in the writer's batch (its root locked by an earlier
    statement): the parent as parent_for_spawn reads it, and the children and the tree's
    size as children_and_tree_size reads them, in one statement."""
    from research import services
    from research.selectors import team
    from research.services.locks import parent_for_spawn, spawn_reads

    root = run_factory()
    a, b, c = (subagent_factory(root, name) for name in ("a", "b", "c"))
    grandchild = subagent_factory(a, "a1")
    services.run_finish(run_id=b.pk, report="b's report")

    for parent in (root, a, b, grandchild):
        with CaptureQueriesContext(connection) as queries:
            read, children, size = spawn_reads(parent.pk)
        assert len(queries) == 1
        expected = parent_for_spawn(parent.pk)
        assert (read.pk, read.get_deferred_fields()) == (
            expected.pk,
            expected.get_deferred_fields(),
        )
        for field in ("owner_id", "root_id", "depth", "model", "dataset_id", "worker_id"):
            assert getattr(read, field) == getattr(expected, field)
        assert (children, size) == team.children_and_tree_size(run_id=parent.pk, root_id=root.pk)
    assert [child.name for child, _ in spawn_reads(root.pk)[1]] == ["a", "b", "c"]
    assert spawn_reads(root.pk)[2] == 4  # the grandchild counts in its tree
    with pytest.raises(Run.DoesNotExist):
        spawn_reads(10**9)


def test_a_column_of_nothing_but_nulls_and_exact_decimals_go_as_one_json_text(run_factory):
    run = run_factory()
    insert = WRITER["call"]
    costs = [Decimal("0.00000001"), Decimal("123456.12345678"), Decimal(0)] * 4
    at = datetime(2026, 12, 5, tzinfo=UTC)
    rows = [(run.pk, None, 0, "m", 2**40, index, cost, 1, at) for index, cost in enumerate(costs)]

    with CaptureQueriesContext(connection) as queries:
        insert.rows(rows)

    assert _as_json(queries[0]) == (connection.vendor == "postgresql")
    stored = LLMCall.objects.filter(run=run).order_by("output_tokens")
    assert [call.cost_usd for call in stored] == costs
    assert {(call.parent_run_id, call.input_tokens) for call in stored} == {(None, 2**40)}


@pytest.mark.parametrize("count", [1, 12])
def test_several_tables_in_one_block_read_back_as_the_orm_wrote_them(run_factory, count):
    """The step writer's shape: a model call's row, its step, its state and its checkpoint,
    deferred together; on PostgreSQL one statement for all four tables."""
    ours, theirs = run_factory(topic="ours"), run_factory(topic="theirs")
    at = datetime(2026, 12, 5, 6, 0, 0, 123456, tzinfo=UTC)
    costs = [Decimal("0.00000001"), Decimal("123456.12345678"), Decimal(0)]
    bodies = [b"", b"\x00\xff\\x", "é 漢字 🙂".encode()]
    state = {"float": 0.1, "big": 2**60, "text": AWKWARD[0], "none": None, "list": [True]}

    def rows(run_id):
        return {
            LLMCall: [
                (run_id, None, i % 3, AWKWARD[i % 9], 2**40, i, costs[i % 3], 7, at)
                for i in range(count)
            ],
            Step: _steps(run_id, count),
            RunState: [(run_id, "thinking", AWKWARD[i % 9], at) for i in range(count)],
            Checkpoint: [
                (run_id, i + 1, bodies[i % 3], i % 2 == 0, state, at) for i in range(count)
            ],
        }

    inserts = {
        LLMCall: WRITER["call"],
        Step: WRITER["step"],
        RunState: WRITER["state"],
        Checkpoint: WRITER["checkpoint"],
    }
    fields = {model: [field.name for field in insert.fields] for model, insert in inserts.items()}
    # Rows the runs have already (their first state) are not the test's.
    before = {
        model: model.objects.order_by("-id").values_list("id", flat=True).first() or 0
        for model in fields
    }
    with CaptureQueriesContext(connection) as queries, inserts_deferred():
        for model, values in rows(ours.pk).items():
            inserts[model].rows(values)
    for model, values in rows(theirs.pk).items():
        names = [model._meta.get_field(name).attname for name in fields[model]]
        model.objects.bulk_create(model(**dict(zip(names, row, strict=True))) for row in values)

    # One statement on PostgreSQL; elsewhere one per table.
    assert len(queries) == (1 if connection.vendor == "postgresql" else 4)

    def read(model, run_id):
        names = [model._meta.get_field(name).attname for name in fields[model][1:]]
        stored = model.objects.filter(run_id=run_id, id__gt=before[model]).order_by("id")
        stored = stored.values_list(*names)
        return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in stored]

    for model, given in rows(ours.pk).items():
        mine = read(model, ours.pk)
        # As given, in the order given (the ids follow it), times to the microsecond...
        assert mine == [row[1:] for row in given], model.__name__
        # ... and as the ORM stored the same values (auto_now_add times aside).
        assert [row[:-1] for row in mine] == [row[:-1] for row in read(model, theirs.pk)]


def test_a_value_json_cannot_say_sends_the_tables_one_insert_each(run_factory):
    """A JSONField's JSON null (Value(None, JSONField())) would read back as SQL NULL through
    the JSON form: those rows go the way they went before, one INSERT per table (pipelined on
    PostgreSQL), and the null is JSON's."""
    run = run_factory()
    at = datetime(2026, 12, 5, tzinfo=UTC)
    steps = Insert(Step, ["run", "kind", "tool", "input", "output", "is_error", "at"])
    states = Insert(RunState, ["run", "state", "detail", "at"])

    with CaptureQueriesContext(connection) as queries, inserts_deferred():
        steps.row(run.pk, "tool", "web_search", Value(None, JSONField()), "", False, at)
        states.row(run.pk, "thinking", "", at)

    assert len(queries) == 2
    assert Step.objects.filter(run=run, input=Value(None, JSONField())).count() == 1
    assert RunState.objects.filter(run=run, state="thinking").count() == 1


def test_many_rows_with_a_value_json_cannot_say_go_as_one_array_a_column(run_factory):
    """Past what psycopg caches, rows go as one JSON text; a JSONField's JSON null would read
    back as SQL NULL that way, so those rows go as one array a column (unnest) instead, and
    the null is JSON's."""
    run = run_factory()
    at = datetime(2026, 12, 5, tzinfo=UTC)
    insert = Insert(Step, ["run", "kind", "tool", "input", "output", "is_error", "at"])
    rows = [(run.pk, "tool", "web_search", {"n": index}, "", False, at) for index in range(9)]
    rows.append((run.pk, "tool", "web_search", Value(None, JSONField()), "", False, at))

    with CaptureQueriesContext(connection) as queries:
        insert.rows(rows)

    assert len(queries) == 1
    if connection.vendor == "postgresql":
        assert "unnest(" in queries[0]["sql"] and not _as_json(queries[0])
    assert Step.objects.filter(run=run, input=Value(None, JSONField())).count() == 1
    assert sorted(step.input["n"] for step in Step.objects.filter(run=run, input__n__gte=0)) == [
        *range(9)
    ]


def _as_json(query: dict) -> bool:
    return "json_populate_recordset(" in query["sql"]


def test_each_value_is_sent_as_the_orms_get_db_prep_save_would_send_it():
    """The conversions taken directly (integers, aware datetimes) and those left to the
    field (a naive datetime, a decimal, an int of a subclass, None) give the same value, of
    the same type, as the field's own get_db_prep_save on this backend."""
    from django.db import connections

    import research.sql_values as sql_values

    class Count(int):
        pass

    db = connections["default"]
    aware = datetime(2026, 12, 5, 6, 0, 1, 250, tzinfo=UTC)
    naive = datetime(2026, 12, 5, 6, 0, 1, 250)
    fields = ["run", "parent_run", "depth", "model", "input_tokens", "output_tokens"]
    fields += ["cost_usd", "latency_ms", "at"]
    prepared = sql_values.Prepared([LLMCall._meta.get_field(name) for name in fields])
    rows = [
        [5, 4, 1, "model", 10**12, 2, Decimal("0.00120000"), 201, aware],
        [5, None, 0, "", 0, 0, Decimal("0"), 0, naive],
        [5, 4, Count(2), "model", Count(3), True, Decimal("1.5"), None, None],
    ]
    with pytest.warns(RuntimeWarning, match="naive datetime"):
        for row in rows:
            expected = [
                field.get_db_prep_save(value, db)
                for field, value in zip(prepared.fields, row, strict=True)
            ]
            got = prepared.values(row, db)
            assert [(type(value), value) for value in got] == [
                (type(value), value) for value in expected
            ]
    # The direct ways are taken where they are meant to be, and only there.
    kinds = [kind for kind, _ in prepared.direct]
    assert kinds[2] is int and kinds[4] is int and kinds[8] is datetime
    assert kinds[0] is kinds[3] is kinds[6] is sql_values.Never  # a key, a text, a decimal
