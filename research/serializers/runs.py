"""Input and output serializers of the REST API: shapes and field checks, no business logic."""

from rest_framework import serializers

from research.endings import Ending
from research.events.payloads import ANALYST, RUN_FIELDS, run_fields
from research.models import Citation, Event, Message, Run, RunState
from research.serializers.clarify import ClarificationSerializer
from research.serializers.fields import TextsField


class RunOutputSerializer(serializers.ModelSerializer):
    """A run's JSON (DESIGN). The shape is built once, by `run_fields`, for the API, the
    snapshot and the `run.created` event alike; the fields here describe it to the schema."""

    parent_id = serializers.IntegerField(read_only=True, allow_null=True)
    root_id = serializers.IntegerField(read_only=True)
    follows_id = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="the done research this one follows up (a thread); null for none",
    )
    dataset_id = serializers.IntegerField(
        read_only=True,
        allow_null=True,
        help_text="the knowledge base its agents search (a follow-up inherits it); null for none",
    )
    active = serializers.BooleanField(
        read_only=True, help_text="queued, working or paused: not ended (the one definition)"
    )
    worked_seconds = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text="time worked so far, time paused for the analyst left out; null before it starts",
    )
    clock_running = serializers.BooleanField(
        read_only=True, help_text="whether worked_seconds grows: started, not paused, not ended"
    )
    clarification = ClarificationSerializer(
        read_only=True,
        allow_null=True,
        help_text="what the lead asked before it started, and the answers; null: it did not ask",
    )
    ending = serializers.ChoiceField(
        choices=[("", "working"), *Ending.choices],
        read_only=True,
        help_text="how the run ended (research/endings.py): a cancelled run's status is "
        "failed, its ending cancelled; empty while it works",
    )

    class Meta:
        model = Run
        fields = list(RUN_FIELDS)
        read_only_fields = fields

    def to_representation(self, run: Run) -> dict:
        return run_fields(run)


class RunSummarySerializer(RunOutputSerializer):
    """A run in a list: its report cut to RESEARCH_LIST_REPORT_CHARS, with a note saying where
    the whole report is (a list of runs with megabyte reports was megabytes). Reads the
    annotations of selectors.run_summaries."""

    def to_representation(self, run: Run) -> dict:
        run.report = run.report_excerpt  # the deferred field is never read
        fields = run_fields(run)
        if run.report_length > len(run.report_excerpt):
            fields["report"] += (
                f"\n\n[cut: the report is {run.report_length:,} characters; the whole report: "
                f"/v1/gb/research/{run.pk}/report]"
            )
        return fields


class RunInTreeSerializer(RunOutputSerializer):
    """A run in a tree: its task as `listed_topic` shows it."""

    def to_representation(self, run: Run) -> dict:
        return run_fields(run, whole_topic=False)


class RunPageSerializer(serializers.Serializer):
    """A page of the run list (a cursor page: follow `next`), for the schema."""

    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = RunOutputSerializer(many=True)


class RunStartSerializer(serializers.Serializer):
    # Range checks live in the service so the API, the CLI and the page say the same thing.
    topic = serializers.CharField(allow_blank=True, trim_whitespace=False)
    max_steps = serializers.IntegerField(required=False, allow_null=True)
    model = serializers.CharField(required=False, allow_blank=True, allow_null=True)
    dataset = serializers.IntegerField(required=False, allow_null=True)
    review_plan = serializers.BooleanField(
        required=False,
        default=False,
        help_text="pause after the lead's first plan until the analyst approves it",
    )
    clarify = serializers.BooleanField(
        required=False,
        default=False,
        help_text="let the lead ask up to three short questions before it starts; the "
        "research waits for the answers (POST .../clarify)",
    )
    callback_url = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    follows = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=2**63 - 1,
        help_text="follow up this done research of yours: the new one starts from its report, "
        "plan and verified sources (a thread); its dataset unless `dataset` says otherwise",
    )


class RefusalSerializer(serializers.Serializer):
    """A refusal's JSON: a 409 for what the run's state does not allow, in words."""

    detail = serializers.CharField()


class RunChangeSerializer(serializers.Serializer):
    starred = serializers.BooleanField(help_text="star the research in the library, or not")


class PlanApproveSerializer(serializers.Serializer):
    # The items' checks live in the service (the page and the API say the same thing).
    items = TextsField(
        item_name="plan item",
        required=False,
        allow_null=True,
        help_text="the plan as edited; leave out to approve it as it is",
    )


class NoteSerializer(serializers.Serializer):
    text = serializers.CharField(allow_blank=True, trim_whitespace=False)


class PlanItemSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    text = serializers.CharField()
    status = serializers.ChoiceField(choices=["open", "working", "covered", "failed", "gap"])
    agents = serializers.ListField(child=serializers.DictField())


class PlanVersionSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    items = serializers.ListField(child=serializers.CharField())
    author = serializers.ChoiceField(choices=["agent", "analyst"])
    approved_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class PlanChangesSerializer(serializers.Serializer):
    since_version = serializers.IntegerField()
    added = serializers.ListField(child=serializers.CharField())
    removed = serializers.ListField(child=serializers.CharField())


class PlanSerializer(serializers.Serializer):
    research = serializers.IntegerField()
    review_plan = serializers.BooleanField()
    awaiting_review = serializers.BooleanField()
    changes = PlanChangesSerializer(
        allow_null=True,
        help_text="a revision of the approved plan waiting for review: what it adds and removes",
    )
    version = serializers.IntegerField(allow_null=True)
    approved = serializers.BooleanField()
    items = PlanItemSerializer(many=True)
    history = PlanVersionSerializer(many=True)


# The largest id a run can have (a 64-bit key): a larger one cannot name a run.
ID_MAX = 2**63 - 1


class RunListFilterSerializer(serializers.Serializer):
    parent_id = serializers.IntegerField(required=False, min_value=1, max_value=ID_MAX)
    root_id = serializers.IntegerField(required=False, min_value=1, max_value=ID_MAX)
    status = serializers.ChoiceField(
        required=False,
        choices=["queued", "working", "paused", "done", "failed"],
        help_text="the stored status: a cancelled run's is failed (filter on ending instead)",
    )
    ending = serializers.ChoiceField(
        required=False,
        choices=Ending.choices,
        help_text="how the run ended, as its `ending` says: cancelled is not failed here",
    )
    q = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="words the topic or report holds, all of them; on PostgreSQL a web search "
        '(stems, "a phrase", -word)',
    )
    since = serializers.DateField(required=False, help_text="started on or after this day")
    until = serializers.DateField(required=False, help_text="started on or before this day")
    roots_only = serializers.BooleanField(
        required=False,
        help_text="only researches, not their sub-agents, as the runs page, the CLI's list and "
        "MCP's list_research show them",
    )
    # allow_null: left out of a query string it is None (no filter), not False.
    starred = serializers.BooleanField(
        required=False, allow_null=True, help_text="only the starred researches (or unstarred)"
    )

    def validate(self, data: dict) -> dict:
        if "since" in data and "until" in data and data["since"] > data["until"]:
            raise serializers.ValidationError({"until": ["until must not be before since."]})
        return data


class RunStateSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunState
        fields = ["id", "run_id", "state", "detail", "at"]


class MessageSerializer(serializers.ModelSerializer):
    from_run_id = serializers.IntegerField(allow_null=True)
    to_run_id = serializers.IntegerField()
    from_name = serializers.SerializerMethodField()
    to_name = serializers.CharField(source="to_run.name")
    from_analyst = serializers.SerializerMethodField()

    class Meta:
        model = Message
        fields = [
            "id",
            "from_run_id",
            "from_name",
            "from_analyst",
            "to_run_id",
            "to_name",
            "text",
            "sent_at",
            "read_at",
        ]

    def get_from_name(self, message: Message) -> str:
        return ANALYST if message.from_run_id is None else message.from_run.name

    def get_from_analyst(self, message: Message) -> bool:
        """A note the analyst sent (from_run_id is then null)."""
        return message.from_run_id is None


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
    flagged_claims = serializers.ListField(
        child=serializers.DictField(), help_text="claims the verifier could not support"
    )


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = Event
        fields = ["seq", "type", "payload", "at"]


class EventsFilterSerializer(serializers.Serializer):
    after = serializers.IntegerField(required=False, min_value=0, default=0)
