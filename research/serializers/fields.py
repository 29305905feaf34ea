"""Fields more than one serializer module uses."""

from rest_framework import serializers

__all__ = ["TextsField"]


class TextsField(serializers.ListField):
    """A list of texts whose errors are one flat list naming the text by its number, as
    every field error of the API is (DRF's own would be an object keyed by index):
    `item_name` names one ("plan item 2: ...")."""

    child = serializers.CharField(allow_blank=True, trim_whitespace=False)

    def __init__(self, *, item_name: str = "item", **kwargs):
        self.item_name = item_name
        super().__init__(**kwargs)

    def run_child_validation(self, data):
        try:
            return super().run_child_validation(data)
        except serializers.ValidationError as error:
            raise serializers.ValidationError(
                [
                    f"{self.item_name} {int(index) + 1}: {message}"
                    for index, messages in error.detail.items()
                    for message in messages
                ]
            ) from None
