"""The shapes of a research's JSON export (frontend/terminal/export.py) where the REST API has
none: the usage ledger, the transcript, citations with their sources, runs with the fields an
archive keeps."""

from rest_framework import serializers

from research.models import LLMCall, Run, Step
from research.serializers.runs import RunOutputSerializer


class LLMCallSerializer(serializers.ModelSerializer):
    run_id = serializers.IntegerField()
    parent_run_id = serializers.IntegerField(allow_null=True)

    class Meta:
        model = LLMCall
        fields = [
            "id",
            "run_id",
            "parent_run_id",
            "depth",
            "model",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "latency_ms",
            "at",
        ]


class StepSerializer(serializers.ModelSerializer):
    run_id = serializers.IntegerField()

    class Meta:
        model = Step
        fields = ["id", "run_id", "kind", "tool", "input", "output", "is_error", "at"]


class ExportCitationSerializer(serializers.Serializer):
    """A citation as an export keeps it: which source proved it, which agent found it."""

    id = serializers.IntegerField()
    run_id = serializers.IntegerField()
    url = serializers.CharField()
    title = serializers.CharField()
    verified = serializers.BooleanField()
    source_id = serializers.IntegerField(allow_null=True)
    found_by = serializers.CharField(allow_null=True)


class ExportRunSerializer(RunOutputSerializer):
    dataset_id = serializers.IntegerField(read_only=True, allow_null=True)

    class Meta(RunOutputSerializer.Meta):
        fields = [*RunOutputSerializer.Meta.fields, "dataset_id", "cancel_requested"]

    def to_representation(self, run: Run) -> dict:
        return {
            **super().to_representation(run),
            "dataset_id": run.dataset_id,
            "cancel_requested": run.cancel_requested,
        }
