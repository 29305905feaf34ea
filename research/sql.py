"""SQL built once for the statements the hot path repeats every step.

Through the ORM a statement costs about half a millisecond of Python on this machine
(building SQL, model instances, signals) before the database sees it, and an agent's step
makes a dozen. These run on the same connection and in the caller's transaction; every value
goes through its field's `get_db_prep_save`, so each backend gets exactly what the ORM would
have sent. Only for models with no save() logic and no signals.
"""

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from django.db import connection, models


class Insert:
    """`INSERT INTO <model's table> (<fields>) VALUES (...), (...)` for one or more rows."""

    def __init__(self, model: type[models.Model], fields: Sequence[str]):
        self.fields = [model._meta.get_field(name) for name in fields]
        columns = ", ".join(connection.ops.quote_name(field.column) for field in self.fields)
        self.head = f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({columns}) "
        self.group = "(" + ", ".join(["%s"] * len(self.fields)) + ")"

    def rows(self, rows: Sequence[Sequence[Any]]) -> None:
        params = [
            field.get_db_prep_save(value, connection)
            for row in rows
            for field, value in zip(self.fields, row, strict=True)
        ]
        with connection.cursor() as cursor:
            cursor.execute(self.head + "VALUES " + ", ".join([self.group] * len(rows)), params)

    def row(self, *values: Any) -> None:
        self.rows([values])


def one(sql: str, params: Sequence[Any]) -> tuple | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def as_decimal(value: Any) -> Decimal:
    # SQLite hands numeric columns back as int or float; PostgreSQL as Decimal.
    return value if isinstance(value, Decimal) else Decimal(str(value))
