"""What every API module of research shares: checking input with a serializer, and the body
types a write's schema declares."""

import difflib
from collections.abc import Collection, Mapping

from rest_framework import serializers

# Query parameters every list reads beside its filters: its page (RunCursorPagination) and
# DRF's format override.
PAGE_PARAMETERS = ("cursor", "page_size", "format")


def checked(
    serializer_class: type[serializers.Serializer], data, *, also: Collection[str] = ()
) -> dict:
    """The validated data, or a 400 naming each bad field (raised as DRF's ValidationError).
    A field the request may not send is one of them: a misspelt `max_step` or `reviewPlan`
    was dropped without a word, and the research started without what it asked for. `also`:
    parameters read elsewhere (a list's page)."""
    serializer = serializer_class(data=data)
    valid = serializer.is_valid()
    errors = {} if valid else dict(serializer.errors)
    if isinstance(data, Mapping):
        fields = [name for name, field in serializer.fields.items() if not field.read_only]
        for name in sorted(set(data) - set(fields) - set(also)):
            errors.setdefault(name, []).append(unknown_field(name, fields))
    if errors:
        raise serializers.ValidationError(errors)
    return serializer.validated_data


def unknown_field(name: str, fields: Collection[str]) -> str:
    """`max_step is not a field of this request (did you mean max_steps?); the fields are:
    ...`: what a client that misspelt a field reads, with the name it may have meant."""
    simple = {field.replace("_", "").lower(): field for field in fields}
    close = difflib.get_close_matches(name.replace("_", "").lower(), simple, n=1, cutoff=0.75)
    meant = f" (did you mean {simple[close[0]]}?)" if close else ""
    listed = ", ".join(fields) or "none"
    return f"{name} is not a field of this request{meant}; the fields are: {listed}."


def json_or_form(serializer_class: type[serializers.Serializer]) -> dict:
    """A write's `request` for extend_schema: JSON or a urlencoded form, never multipart. A
    malformed multipart body is refused by daphne (Twisted) with an empty 400 before it
    reaches Django, so the schema names only the two forms the API itself answers for."""
    return {
        "application/json": serializer_class,
        "application/x-www-form-urlencoded": serializer_class,
    }
