"""What POST /v1/gb/research/<id>/resume answers: the research queued again, the runs that go
on, and the ledger split by attempt (what the first attempt spent, and each resume)."""

from rest_framework import serializers

from research.serializers.runs import RunOutputSerializer

__all__ = ["AttemptSpendSerializer", "ResumeSerializer"]


class AttemptSpendSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(help_text="1 for the first attempt, then each resume")
    started_at = serializers.DateTimeField(
        allow_null=True, help_text="when this resume queued the tree; null for the first"
    )
    calls = serializers.IntegerField(help_text="model calls of the tree in this attempt")
    cost_usd = serializers.DecimalField(max_digits=14, decimal_places=8)


class ResumeSerializer(serializers.Serializer):
    research = RunOutputSerializer()
    resumed_run_ids = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="the runs that go on from their last completed step, the root first",
    )
    ended_with = serializers.CharField(help_text="why the earlier attempt ended")
    spend = AttemptSpendSerializer(many=True)
