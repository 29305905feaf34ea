"""Values as the ORM would send them, for the statements built once (research.sql): each
field's conversion (`Prepared`), and the JSON form of a prepared value (`plain`) for the
rows of several tables sent as JSON."""

import json
import math
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import models
from psycopg.dbapi20 import Binary
from psycopg.types.json import Jsonb

# Fields whose get_db_prep_save hands a value of these types back unchanged on every backend
# (the ORM converts only what is not already of the field's type): the hot path's keys, flags
# and texts skip three calls a value. Exact classes: a subclass may convert. Not the other
# integer fields: on PostgreSQL the ORM sends their values as Int4 or Int8, where a bare int
# would go as the smallest type that holds it (and prepare one statement per combination).
_UNCHANGED: dict[type, tuple[type, ...]] = {
    models.AutoField: (int,),
    models.BigAutoField: (int,),
    models.BooleanField: (bool,),
    models.CharField: (str,),
    models.TextField: (str,),
}


# Integer fields whose get_db_prep_save, for an int, is its backend's
# adapt_integerfield_value (PostgreSQL sends Int2, Int4 or Int8; the others the int itself).
_INTEGERS = (
    models.IntegerField,
    models.SmallIntegerField,
    models.BigIntegerField,
    models.PositiveIntegerField,
    models.PositiveSmallIntegerField,
    models.PositiveBigIntegerField,
)


class Prepared:
    """Each value as its field's get_db_prep_save would send it. The values a field sends as
    they are go unchanged, and the hot path's integers and aware datetimes take the last of
    the ORM's calls directly (a step's batch converts hundreds: 3 to 4 microseconds each
    through get_db_prep_save on this machine, a third to a tenth of that directly)."""

    def __init__(self, fields: Sequence[models.Field]):
        self.fields = list(fields)
        self.unchanged = [_unchanged(field) for field in fields]
        self.direct = [_direct(field) for field in fields]

    def values(self, values: Sequence[Any], db: Any) -> list[Any]:
        """`db` is the thread's own wrapper, found once by the caller: each field's conversion
        reads its `ops` and `features`, through the proxy's per-thread lookup otherwise."""
        return [
            value
            if type(value) in unchanged
            else convert(value, db)
            if type(value) is kind
            else field.get_db_prep_save(value, db)
            for field, unchanged, (kind, convert), value in zip(
                self.fields, self.unchanged, self.direct, values, strict=True
            )
        ]


def _unchanged(field: models.Field) -> tuple[type, ...]:
    """The types of the values `field` sends as they are (None included), or none."""
    if isinstance(field, models.ForeignKey):  # a key's value is its target field's
        field = field.target_field
    types = _UNCHANGED.get(type(field))
    return (*types, type(None)) if types else ()


class Never:
    """The type no value has: a field with no direct conversion."""


def _direct(field: models.Field) -> tuple[type, Any]:
    """The type of value `field` converts directly, and how: what its get_db_prep_save ends
    with for that type (Django 5.2's IntegerField and DateTimeField). Exact field classes
    only: a subclass may convert otherwise."""
    if type(field) in _INTEGERS:
        internal = field.get_internal_type()
        return int, lambda value, db: db.ops.adapt_integerfield_value(value, internal)
    if type(field) is models.DateTimeField:

        def aware(value: datetime, db: Any) -> Any:
            # A naive one is warned about and made aware by the field: it goes that way.
            if value.utcoffset() is None:
                return field.get_db_prep_save(value, db)
            return db.ops.adapt_datetimefield_value(value)

        return datetime, aware
    return Never, None


class NotPlain(Exception):
    """A value the JSON form of the rows does not carry."""


# Values JSON carries as they are: int subclasses too (psycopg's Int2, Int4, Int8).
_AS_THEY_ARE = (str, int, float, bool, type(None))


def plain(value: Any) -> Any:
    """A prepared value as JSON says it to the server: what the column's type reads back as
    the same value. A JSONField's value nests as it is (its JSON null would read as SQL NULL,
    so it does not go this way); a JSON number is exact, a decimal goes as its text."""
    if isinstance(value, _AS_THEY_ARE):
        if isinstance(value, float) and not math.isfinite(value):
            raise NotPlain
        return value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise NotPlain
        return value.isoformat()
    if isinstance(value, Jsonb):
        if value.obj is None or value.dumps not in (None, json.dumps):
            raise NotPlain
        return value.obj
    if isinstance(value, Binary):  # a BinaryField's bytes, as Django hands them to psycopg
        value = value.obj
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    raise NotPlain
