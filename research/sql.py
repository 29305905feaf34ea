"""SQL built once for the statements the hot path repeats every step.

Through the ORM a statement costs about half a millisecond of Python on this machine
(building SQL, model instances, signals) before the database sees it, and an agent's step
makes a dozen. These run on the same connection and in the caller's transaction; every value
goes through its field's `get_db_prep_save` (but for the values it would hand back unchanged),
so each backend gets exactly what the ORM would have sent (research.sql_values). Only for
models with no save() logic and no signals.
"""

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models.expressions import Col

from research.sql_values import NotPlain, Prepared, plain

log = logging.getLogger(__name__)

_deferred = threading.local()


# psycopg converts a statement's `%s` to `$n` once per text, and only for statements of at
# most this many parameters (psycopg._queries.MAX_CACHED_STATEMENT_PARAMS): a longer one,
# whose text rarely repeats, is parsed again in Python on every run.
PSYCOPG_CACHED_PARAMS = 50


def as_arrays(db: Any, values: int) -> bool:
    """Whether a statement of `values` row values goes better as a few parameters than as one
    a value: on PostgreSQL, past what psycopg caches. An INSERT's rows then go as one JSON
    text (`Insert.json`), or one array per column (`unnest`, `by_column`) where JSON cannot
    say a value; the writer's UPDATE as arrays. Below it they cost more than they save
    (docs/performance.md, rounds fourteen and twenty-six)."""
    return values > PSYCOPG_CACHED_PARAMS and db.vendor == "postgresql"


def unnest(fields: Sequence[models.Field]) -> str:
    """`unnest(%b::<type>[], ...)`: rows as one binary array per column of `fields` (binary:
    psycopg writes each element as it is, where the text form escapes every string in
    Python). Its parameters come from `by_column`."""
    return "unnest(" + ", ".join(f"%b::{field.db_type(connection)}[]" for field in fields) + ")"


def by_column(rows: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """The parameters of `unnest`: each column's values, row by row."""
    return [list(column) for column in zip(*rows, strict=True)]


class Insert:
    """`INSERT INTO <model's table> (<fields>) VALUES (...), (...)` for one or more rows.

    On PostgreSQL, rows of more than PSYCOPG_CACHED_PARAMS values go as one JSON text instead
    (`as_arrays`, `from_json`), or as one array per column (`INSERT ... SELECT ... FROM
    unnest(%b::<type>[], ...)`) when a value cannot be said in JSON: one text and few
    parameters whatever the number of rows, so psycopg converts it once, and the server
    prepares it once per connection rather than parsing each batch's new text. A batch's
    INSERT of a few hundred values was parsed in Python each time: with 120 agents, over half
    the writer's CPU (issue 25, round fourteen). The JSON text is written by the json module's
    C encoder, where psycopg dumped each array in Python (round twenty-six)."""

    def __init__(self, model: type[models.Model], fields: Sequence[str]):
        self.fields = [model._meta.get_field(name) for name in fields]
        self._prepared = Prepared(self.fields)
        columns = ", ".join(connection.ops.quote_name(field.column) for field in self.fields)
        self.head = f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({columns}) "
        self.key = model._meta.pk
        self.group = f"({placeholders(len(self.fields))})"
        # The rows go in the order given (their ids follow it: a transcript's steps, a run's
        # states), said rather than assumed.
        names = [f"c{index}" for index in range(len(self.fields))]
        self.unnest = (
            f"{self.head}SELECT {', '.join(names)} FROM {unnest(self.fields)} "
            f"WITH ORDINALITY AS u({', '.join(names)}, position) ORDER BY position"
        )
        # The rows as one JSON array of objects (`_together`), read into the table's own row
        # type: each value through its column's type, as a parameter would be.
        self.keys = [field.column for field in self.fields]
        table = connection.ops.quote_name(model._meta.db_table)
        self.from_json = (
            f"{self.head}SELECT {columns} FROM json_populate_recordset(NULL::{table}, %s::json) "
            "WITH ORDINALITY AS u ORDER BY u.ordinality"
        )

    def rows(self, rows: Sequence[Sequence[Any]]) -> None:
        pending = getattr(_deferred, "pending", None)
        if pending is not None:
            pending.setdefault(self, []).extend(rows)
            return
        self._insert(rows)

    def _insert(self, rows: Sequence[Sequence[Any]]) -> None:
        db = connections[DEFAULT_DB_ALIAS]
        sql, params = self._statement(rows, db)
        with db.cursor() as cursor:
            cursor.execute(sql, params)

    def _statement(self, rows: Sequence[Sequence[Any]], db: Any) -> tuple[str, list[Any]]:
        """The INSERT of `rows` and its parameters: a VALUES group a row, or past what psycopg
        caches (`as_arrays`) one JSON text, or one array a column for values JSON cannot say."""
        prepared = self.prepared(rows, db)
        if as_arrays(db, len(rows) * len(self.fields)):
            try:
                return self.from_json, [self.json(prepared)]
            except NotPlain:
                return self.unnest, by_column(prepared)
        sql = self.head + "VALUES " + ", ".join([self.group] * len(rows))
        return sql, [value for values in prepared for value in values]

    def row(self, *values: Any) -> None:
        self.rows([values])

    def create(
        self,
        objs: Sequence[models.Model],
        *,
        annotate: Sequence[tuple[str, str]] = (),
        prefix: tuple[str, Sequence[Any]] = ("", ()),
    ) -> None:
        """Save new model instances in one INSERT, as `QuerySet.bulk_create` does (each field's
        `pre_save`, so `auto_now_add` stamps them; no signals, no save()), and give each its
        id. Never deferred: the caller needs the ids. Made for an Insert of every concrete
        field but the key (`Insert.every`). `annotate`: (name, SQL expression) of each value
        RETURNING gives with the id, set on each instance as an attribute (an expression
        names the table's columns by its table's name, or what `prefix` names). `prefix`: a
        WITH clause before the INSERT and its parameters (events.store.reserve_clause)."""
        if not objs:
            return
        if self.key in self.fields or any(obj.pk is not None for obj in objs):
            raise ValueError("Insert.create numbers new rows: no key may be given")
        db = connections[DEFAULT_DB_ALIAS]
        rows = [[field.pre_save(obj, True) for field in self.fields] for obj in objs]
        sql, params = self._statement(rows, db)
        key = connection.ops.quote_name(self.key.column)
        returning = ", ".join([key, *(expression for _, expression in annotate)])
        with_clause, with_params = prefix
        with db.cursor() as cursor:
            cursor.execute(f"{with_clause}{sql} RETURNING {returning}", [*with_params, *params])
            # One statement inserts its rows in order and numbers them in that order, while
            # RETURNING promises no order: the ids, sorted, are the rows' in order.
            returned = sorted(cursor.fetchall())
        for obj, (pk, *values) in zip(objs, returned, strict=True):
            for (name, _), value in zip(annotate, values, strict=True):
                setattr(obj, name, value)
            obj.pk = pk
            obj._state.adding = False
            obj._state.db = db.alias

    @classmethod
    def every(cls, model: type[models.Model]) -> "Insert":
        """The Insert of every concrete field of `model` but its key: what `create` takes."""
        return cls(model, [f.name for f in model._meta.concrete_fields if not f.primary_key])

    def prepared(self, rows: Sequence[Sequence[Any]], db: Any) -> list[list[Any]]:
        return [self._prepared.values(row, db) for row in rows]

    def json(self, prepared: list[list[Any]]) -> str:
        """Prepared rows as one JSON array of objects, as `from_json` reads them; NotPlain for
        a value JSON cannot say exactly (research.sql_values.plain)."""
        return json.dumps(
            [dict(zip(self.keys, map(plain, row), strict=True)) for row in prepared],
            ensure_ascii=False,
            separators=(",", ":"),
        )


class Update:
    """`UPDATE <model's table> SET <fields> WHERE id = %s`: one row's fields, by its key."""

    def __init__(self, model: type[models.Model], fields: Sequence[str]):
        self.fields = [model._meta.get_field(name) for name in fields]
        self._prepared = Prepared(self.fields)
        sets = ", ".join(f"{connection.ops.quote_name(field.column)} = %s" for field in self.fields)
        table = connection.ops.quote_name(model._meta.db_table)
        self.sql = f"UPDATE {table} SET {sets} WHERE {connection.ops.quote_name('id')} = %s"

    def row(self, pk: Any, *values: Any) -> None:
        db = connections[DEFAULT_DB_ALIAS]
        params = self._prepared.values(values, db)
        with db.cursor() as cursor:
            cursor.execute(self.sql, [*params, pk])


class Instances:
    """Model instances from a statement built once: `columns` to put in its SELECT (or
    RETURNING), and each row it returns made an instance as the ORM makes it (each field's
    converters, then Model.from_db), without the ORM's work per query. `fields` names a part
    of the model's columns (the instance defers the rest); `extra` names what follows them in
    each row (an annotation), set on the instance as attributes."""

    def __init__(
        self,
        model: type[models.Model],
        fields: Sequence[str] = (),
        *,
        alias: str = "",
        extra: Sequence[str] = (),
    ):
        named = {model._meta.get_field(name).attname for name in fields}
        # from_db takes a part of the columns in the model's own order.
        self.fields = [f for f in model._meta.concrete_fields if not named or f.attname in named]
        prefix = f"{alias}." if alias else ""
        self.columns = ", ".join(prefix + connection.ops.quote_name(f.column) for f in self.fields)
        self.model = model
        self.extra = tuple(extra)
        self._converters: list[tuple[int, list, Any]] | None = None

    def first(self, sql: str, params: Sequence[Any]) -> Any:
        """The instance of the statement's first row; None when it returns none."""
        row = one(sql, params)
        return None if row is None else self.instance(row)

    def get(self, sql: str, params: Sequence[Any]) -> Any:
        """`first`, but a statement that returns no row raises the model's DoesNotExist, as
        `Model.objects.get` does."""
        instance = self.first(sql, params)
        if instance is None:
            name = self.model._meta.object_name
            raise self.model.DoesNotExist(f"no {name} matches the statement's {list(params)}")
        return instance

    def all(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """The instances of every row the statement returns."""
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return [self.instance(row) for row in cursor.fetchall()]

    def instance(self, row: Sequence[Any]) -> Any:
        if self._converters is None:
            self._converters = self._find_converters()
        db = connections[DEFAULT_DB_ALIAS]
        count = len(self.fields)
        values = list(row[:count])
        for index, converters, expression in self._converters:
            for convert in converters:
                values[index] = convert(values[index], expression, db)
        instance = self.model.from_db(db.alias, [field.attname for field in self.fields], values)
        for name, value in zip(self.extra, row[count:], strict=True):
            setattr(instance, name, value)
        return instance

    def _find_converters(self) -> list[tuple[int, list, Any]]:
        found = []
        for index, field in enumerate(self.fields):
            column = Col(self.model._meta.db_table, field)
            converters = connection.ops.get_db_converters(column) + column.get_db_converters(
                connection
            )
            if converters:
                found.append((index, converters, column))
        return found


@cache
def whole(model: type[models.Model]) -> Instances:
    """The Instances of every column of `model`, one for the process (its converters found
    once)."""
    return Instances(model)


@contextmanager
def inserts_deferred() -> Iterator[None]:
    """Hold the rows of every Insert made in this block (in this thread) and write them at its
    end, rows in the order they came: on PostgreSQL in one statement whatever the tables
    (`_together`), elsewhere one INSERT per table. A block inside another adds its rows to the
    outer one's. When the block raises, its rows are dropped (the caller's transaction rolls
    back what came before)."""
    if getattr(_deferred, "pending", None) is not None:
        yield
        return
    pending: dict[Insert, list[Sequence[Any]]] = {}
    _deferred.pending = pending
    try:
        yield
    finally:
        _deferred.pending = None
    if not pending:
        return
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor == "postgresql" and len(pending) > 1:
        _together(pending, db)
        return
    for insert, rows in pending.items():
        insert._insert(rows)


def _together(pending: dict[Insert, list[Sequence[Any]]], db: Any) -> None:
    """The rows of several tables in one statement, each table's rows as one JSON text: one
    statement where there was one per table, and a few parameters where there was one per
    value. Each statement cost the driver's and Django's work (about a tenth of a millisecond
    here) and each array or value the driver's dumping in Python, in every batch of the step
    writer; the JSON text is written by the json module's C encoder (issue 25, round sixteen).

    Each INSERT keeps its rows' order (WITH ORDINALITY), and a key to a row inserted alongside
    is checked at the end of the statement. The values are those the fields prepared, written
    as the server reads them (research.sql_values.plain); one the JSON form cannot carry
    exactly has the rows go one INSERT per table instead, in one round trip."""
    inserts = sorted(pending, key=lambda insert: insert.head)  # one text per set of tables
    try:
        params = [insert.json(insert.prepared(pending[insert], db)) for insert in inserts]
    except NotPlain:
        db.ensure_connection()
        # The pipeline's exit sends and reads what was queued: its errors are psycopg's own,
        # so they go through Django's wrapper as a cursor's do (a lost connection is then
        # Django's OperationalError, and the connection is marked for resilience to drop).
        with db.wrap_database_errors, db.connection.pipeline():
            for insert in inserts:
                insert._insert(pending[insert])
        return
    with db.cursor() as cursor:
        cursor.execute(_together_sql(tuple(inserts)), params)


@cache
def _together_sql(inserts: tuple[Insert, ...]) -> str:
    *first, last = inserts
    ctes = ", ".join(f"i{index} AS ({insert.from_json})" for index, insert in enumerate(first))
    return f"WITH {ctes} {last.from_json}"


def placeholders(count: int) -> str:
    """`%s, %s, ...`: `count` parameters in a statement built once (an IN list, a row)."""
    return ", ".join(["%s"] * count)


def one(sql: str, params: Sequence[Any]) -> tuple | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def as_decimal(value: Any) -> Decimal:
    # SQLite hands numeric columns back as int or float; PostgreSQL as Decimal.
    return value if isinstance(value, Decimal) else Decimal(str(value))


def give_back_connection() -> None:
    """Return the thread's connection to the connection pool (PostgreSQL) while it waits:
    connections then follow the threads working, not the threads alive, and hundreds of
    agents waiting on their models fit in a pool of tens. The next query takes one back.
    Not inside a transaction, and not on SQLite, whose connections are not pooled. Called
    at every model call and tool turn: the thread's wrapper is looked up once (each access
    through `connection` is a lookup of its own), and one given back already is left as is.
    A thread that never used the database (an agent on its way to its first model call) has
    no wrapper, and none is made for it here."""
    made = connections.all(initialized_only=True)
    db = next((db for db in made if db.alias == DEFAULT_DB_ALIAS), None)
    if (
        db is not None
        and db.connection is not None
        and db.vendor == "postgresql"
        and db.settings_dict.get("OPTIONS", {}).get("pool")
        and not db.in_atomic_block
    ):
        db.close()


def drop_broken_connection() -> None:
    """Close this thread's connection when its last query failed, so the next one opens a
    fresh connection: Django does not reconnect by itself outside a request. Inside a
    transaction nothing is closed (the atomic block does it on its way out)."""
    if connection.in_atomic_block:
        return
    try:
        connection.close_if_unusable_or_obsolete()
    except Exception:
        try:
            connection.close()
        except Exception:
            log.debug("closing a broken connection failed", exc_info=True)


def row_lock(of: str = "") -> str:
    """What select_for_update(no_key=True, of=...) appends to a SELECT, for SQL built once.
    SQLite has no row locks (its transactions take the database's write lock, BEGIN
    IMMEDIATE) and Django sends none."""
    if not connection.features.has_select_for_no_key_update:
        return ""
    return f" FOR NO KEY UPDATE OF {of}" if of else " FOR NO KEY UPDATE"
