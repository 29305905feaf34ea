"""The clarify step's shapes (issue 27): what the lead asked and the analyst answered, and
the analyst's answer (or skip)."""

from rest_framework import serializers

from research.serializers.fields import TextsField
from research.services.clarify import MAX_QUESTIONS

__all__ = ["ClarificationSerializer", "ClarifyAnswerSerializer"]


class ClarificationSerializer(serializers.Serializer):
    questions = serializers.ListField(
        child=serializers.CharField(), help_text=f"the lead's questions, 1 to {MAX_QUESTIONS}"
    )
    answers = serializers.ListField(
        child=serializers.CharField(allow_blank=True),
        allow_null=True,
        help_text='one per question ("" for one left blank); null while the research waits',
    )
    skipped = serializers.BooleanField(help_text="the analyst skipped the questions")


class ClarifyAnswerSerializer(serializers.Serializer):
    # The answers' checks live in the service (the page, the CLI and MCP say the same thing).
    answers = TextsField(
        item_name="answer",
        required=False,
        allow_null=True,
        help_text='one answer per question, in order; "" leaves one unanswered',
    )
    skip = serializers.BooleanField(
        required=False, default=False, help_text="start without answering the questions"
    )

    def validate(self, data: dict) -> dict:
        if not data.get("skip") and data.get("answers") is None:
            raise serializers.ValidationError(
                {"answers": ["send answers (one per question), or skip: true to start without."]}
            )
        return data
