"""Statements built once (research.sql): many rows in one INSERT come back from the database
exactly as the ORM writes them, whichever form the INSERT takes on PostgreSQL (a row per
VALUES group, or one array per column past psycopg's cached size)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from research.models import LLMCall, Step
from research.sql import PSYCOPG_CACHED_PARAMS, Insert

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
    arrays = count * len(insert.fields) > PSYCOPG_CACHED_PARAMS

    with CaptureQueriesContext(connection) as queries:
        insert.rows(_steps(ours.pk, count))
    Step.objects.bulk_create(
        Step(run_id=r, kind=k, tool=t, input=i, output=o, is_error=e, at=a)
        for r, k, t, i, o, e, a in _steps(theirs.pk, count)
    )

    assert len(queries) == 1
    assert ("unnest(" in queries[0]["sql"]) == (arrays and connection.vendor == "postgresql")
    mine, orm = _read_steps(ours.pk), _read_steps(theirs.pk)
    assert len(mine) == count
    # The same values as the ORM's rows (whose `at` is its own: auto_now_add)...
    assert [row[1:6] for row in mine] == [row[1:6] for row in orm]
    # ... in the order given, with the times given, to the microsecond.
    assert [row[6] for row in mine] == [row[6] for row in _steps(ours.pk, count)]


def test_a_column_of_nothing_but_nulls_and_exact_decimals_go_as_arrays(run_factory):
    run = run_factory()
    insert = Insert(
        LLMCall,
        [
            "run",
            "parent_run",
            "depth",
            "model",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "latency_ms",
            "at",
        ],
    )
    costs = [Decimal("0.00000001"), Decimal("123456.12345678"), Decimal(0)] * 4
    at = datetime(2026, 12, 5, tzinfo=UTC)
    rows = [(run.pk, None, 0, "m", 2**40, index, cost, 1, at) for index, cost in enumerate(costs)]

    with CaptureQueriesContext(connection) as queries:
        insert.rows(rows)

    assert ("unnest(" in queries[0]["sql"]) == (connection.vendor == "postgresql")
    stored = LLMCall.objects.filter(run=run).order_by("output_tokens")
    assert [call.cost_usd for call in stored] == costs
    assert {(call.parent_run_id, call.input_tokens) for call in stored} == {(None, 2**40)}
