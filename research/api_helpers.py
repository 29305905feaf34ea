"""What every API module of research shares: checking input with a serializer."""

from rest_framework import serializers


def checked(serializer_class: type[serializers.Serializer], data) -> dict:
    """The validated data, or a 400 naming each bad field (raised as DRF's ValidationError)."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data
