"""Input and output serializers of the REST API: shapes and field checks, no business logic."""

from rest_framework import serializers

from research.events.payloads import RUN_FIELDS, run_fields
from research.models import Citation, Event, Message, Run, RunState


class RunOutputSerializer(serializers.ModelSerializer):
    """A run's JSON (DESIGN). The shape is built once, by `run_fields`, for the API, the
    snapshot and the `run.created` event alike; the fields here describe it to the schema."""

    parent_id = serializers.IntegerField(read_only=True)
    root_id = serializers.IntegerField(read_only=True)

    class Meta:
        model = Run
        fields = list(RUN_FIELDS)
        read_only_fields = fields

    def to_representation(self, run: Run) -> dict:
        return run_fields(run)


class RunStartSerializer(serializers.Serializer):
    # Range checks live in the service so the API, the CLI and the page say the same thing.
    topic = serializers.CharField(allow_blank=True, trim_whitespace=False)
    max_steps = serializers.IntegerField(required=False, allow_null=True)
    model = serializers.CharField(required=False, allow_blank=True, allow_null=True)
    dataset = serializers.IntegerField(required=False, allow_null=True)
    callback_url = serializers.CharField(required=False, allow_blank=True, max_length=2000)


class RunListFilterSerializer(serializers.Serializer):
    parent_id = serializers.IntegerField(required=False, min_value=1)
    root_id = serializers.IntegerField(required=False, min_value=1)
    status = serializers.ChoiceField(
        required=False, choices=["queued", "working", "done", "failed"]
    )


class RunStateSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunState
        fields = ["id", "run_id", "state", "detail", "at"]


class MessageSerializer(serializers.ModelSerializer):
    from_run_id = serializers.IntegerField()
    to_run_id = serializers.IntegerField()
    from_name = serializers.CharField(source="from_run.name")
    to_name = serializers.CharField(source="to_run.name")

    class Meta:
        model = Message
        fields = [
            "id",
            "from_run_id",
            "from_name",
            "to_run_id",
            "to_name",
            "text",
            "sent_at",
            "read_at",
        ]


class CitationSerializer(serializers.ModelSerializer):
    status = serializers.SerializerMethodField()
    found_by = serializers.CharField(allow_null=True, read_only=True)
    found_by_id = serializers.IntegerField(allow_null=True, read_only=True)

    class Meta:
        model = Citation
        fields = ["url", "title", "verified", "status", "found_by", "found_by_id"]

    def get_status(self, citation: Citation) -> str:
        return "verified" if citation.verified else "flagged: not seen by any agent"


class ReportSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    report = serializers.CharField()
    citations = CitationSerializer(many=True)


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = Event
        fields = ["seq", "type", "payload", "at"]


class EventsFilterSerializer(serializers.Serializer):
    after = serializers.IntegerField(required=False, min_value=0, default=0)
