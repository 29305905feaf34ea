"""What every API module of research shares: checking input with a serializer, and the body
types a write's schema declares."""

from rest_framework import serializers


def checked(serializer_class: type[serializers.Serializer], data) -> dict:
    """The validated data, or a 400 naming each bad field (raised as DRF's ValidationError)."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def json_or_form(serializer_class: type[serializers.Serializer]) -> dict:
    """A write's `request` for extend_schema: JSON or a urlencoded form, never multipart. A
    malformed multipart body is refused by daphne (Twisted) with an empty 400 before it
    reaches Django, so the schema names only the two forms the API itself answers for."""
    return {
        "application/json": serializer_class,
        "application/x-www-form-urlencoded": serializer_class,
    }
