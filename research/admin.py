"""The Django admin: every run, its tree and its records, for staff.

Agents are the only writers of what they record (states, steps, usage, events), so those
fields and models are read-only here; runs start through the API or the page (run_start
does what a bare insert would not: limits, root, first state, event), so the admin never adds
one, and what run_start fixed (owner, tree, model, task) stays as it set it. Documents are
added through the knowledge service, as the API adds them. Deleting and cancelling go
through the services, which cancel working agents first. Every list page joins what it shows
(list_select_related) so it runs a fixed number of queries however many rows it holds.
"""

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator

from research import services
from research.models import (
    ACTIVE_STATUSES,
    Chunk,
    Citation,
    Dataset,
    Document,
    Event,
    LLMCall,
    Message,
    Profile,
    Run,
    RunState,
    Source,
    Step,
    Worker,
)
from research.services import knowledge


def _short(text: str, length: int = 80) -> str:
    return Truncator(text).chars(length)


def _changelist_url(model: type, **filters: object) -> str:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    query = "&".join(f"{key}={value}" for key, value in filters.items())
    return f"{url}?{query}" if query else url


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records agents write: viewable, never added or edited by hand.

    Deletion stays allowed so that deleting a run (which cascades to these rows) is not
    refused for want of a delete permission on them.
    """

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    """A run's records shown on its page: view only, no add, no delete."""

    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


# --- Runs ------------------------------------------------------------------------------------


class ChildInline(ReadOnlyInline):
    model = Run
    fk_name = "parent"
    verbose_name = "sub-agent"
    verbose_name_plural = "sub-agents"
    fields = ["name", "status", "state", "steps", "cost_usd", "tree_cost_usd", "reason"]
    readonly_fields = fields
    ordering = ["id"]


class RunStateInline(ReadOnlyInline):
    model = RunState
    fields = ["state", "detail", "at"]
    readonly_fields = fields
    show_change_link = False


class SentMessageInline(ReadOnlyInline):
    model = Message
    fk_name = "from_run"
    verbose_name = "message sent"
    verbose_name_plural = "messages sent"
    fields = ["to_run", "text", "sent_at", "read_at"]
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        return super().get_queryset(request).select_related("to_run")


class ReceivedMessageInline(ReadOnlyInline):
    model = Message
    fk_name = "to_run"
    verbose_name = "message received"
    verbose_name_plural = "messages received"
    fields = ["from_run", "text", "sent_at", "read_at"]
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        return super().get_queryset(request).select_related("from_run")


class StepInline(ReadOnlyInline):
    model = Step
    verbose_name = "step"
    verbose_name_plural = "transcript"
    fields = ["kind", "tool", "input", "output_excerpt", "is_error", "at"]
    readonly_fields = fields

    @admin.display(description="output")
    def output_excerpt(self, step: Step) -> str:
        return _short(step.output, 300)


class LLMCallInline(ReadOnlyInline):
    model = LLMCall
    fk_name = "run"
    verbose_name = "LLM call"
    verbose_name_plural = "LLM calls"
    fields = ["model", "input_tokens", "output_tokens", "cost_usd", "latency_ms", "at"]
    readonly_fields = fields


# Fixed by run_start and subagent_create (and the worker by the claim), never edited by hand:
# the events and messages endpoints trust root_id, the owner decides who sees the whole tree,
# and pricing.cost raises for a model with no price.
RUN_FIXED_FIELDS = [
    "owner",
    "name",
    "reason",
    "topic",
    "model",
    "dataset",
    "max_steps",
    "parent",
    "root",
    "depth",
    "worker",
]
# Written by the services and the agents, never typed in by hand.
RUN_AGENT_FIELDS = [
    "status",
    "state",
    "steps",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "tree_cost_usd",
    "report",
    "error",
    "created_at",
    "started_at",
    "finished_at",
    "cancel_requested",
    "cancel_reason",
    "event_seq",
]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "label",
        "owner",
        "status",
        "state",
        "depth",
        "model",
        "steps",
        "cost_usd",
        "tree_cost_usd",
        "created_at",
    ]
    list_display_links = ["id", "label"]
    list_filter = ["status", "state", "model", "depth", "owner"]
    search_fields = ["topic", "name", "report"]
    list_select_related = ["owner"]
    readonly_fields = [*RUN_FIXED_FIELDS, *RUN_AGENT_FIELDS, "records"]
    fieldsets = [
        (None, {"fields": ["owner", "name", "reason", "topic", "model", "dataset", "max_steps"]}),
        ("Tree", {"fields": ["parent", "root", "depth", "worker", "records"]}),
        (
            "Progress",
            {
                "fields": [
                    "status",
                    "state",
                    "steps",
                    "input_tokens",
                    "output_tokens",
                    "cost_usd",
                    "tree_cost_usd",
                    "cancel_requested",
                    "cancel_reason",
                    "event_seq",
                ]
            },
        ),
        ("Result", {"fields": ["report", "error"]}),
        ("Times", {"fields": ["created_at", "started_at", "finished_at"]}),
    ]
    inlines = [
        ChildInline,
        RunStateInline,
        SentMessageInline,
        ReceivedMessageInline,
        StepInline,
        LLMCallInline,
    ]
    actions = ["cancel_runs"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="name / topic")
    def label(self, run: Run) -> str:
        return run.name or _short(run.topic, 60)

    @admin.display(description="records")
    def records(self, run: Run) -> str:
        """Links to the full lists (the inlines show a run's own rows; events are per tree)."""
        if run.pk is None:
            return "-"
        links = [
            ("sub-agents", _changelist_url(Run, parent__id__exact=run.pk)),
            ("whole tree", _changelist_url(Run, root__id__exact=run.root_id or run.pk)),
            ("events of the tree", _changelist_url(Event, root__id__exact=run.root_id or run.pk)),
            ("transcript", _changelist_url(Step, run__id__exact=run.pk)),
            ("LLM calls", _changelist_url(LLMCall, run__id__exact=run.pk)),
            ("sources", _changelist_url(Source, run__id__exact=run.pk)),
            ("citations", _changelist_url(Citation, run__id__exact=run.pk)),
        ]
        return format_html_join(" · ", '<a href="{}">{}</a>', ((u, t) for t, u in links))

    @admin.action(description="Cancel selected runs")
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        active = list(queryset.filter(status__in=ACTIVE_STATUSES))
        for run in active:
            services.run_cancel(run=run)
        self.message_user(
            request,
            f"Cancelled {len(active)} run{'s' if len(active) != 1 else ''}; "
            "working agents stop within a second.",
            messages.SUCCESS,
        )

    def delete_model(self, request: HttpRequest, obj: Run) -> None:
        services.run_delete(run=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        for run in queryset:
            services.run_delete(run=run)


@admin.register(RunState)
class RunStateAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "state", "detail", "at"]
    list_filter = ["state"]
    list_select_related = ["run"]
    raw_id_fields = ["run"]
    search_fields = ["detail"]


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ["id", "from_run", "to_run", "excerpt", "sent_at", "read_at"]
    list_select_related = ["from_run", "to_run"]
    raw_id_fields = ["from_run", "to_run"]
    search_fields = ["text"]

    @admin.display(description="text")
    def excerpt(self, message: Message) -> str:
        return _short(message.text)


@admin.register(LLMCall)
class LLMCallAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "run",
        "model",
        "depth",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "latency_ms",
        "at",
    ]
    list_filter = ["model", "depth"]
    list_select_related = ["run"]
    raw_id_fields = ["run", "parent_run"]


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "kind", "tool", "is_error", "excerpt", "at"]
    list_filter = ["kind", "tool", "is_error"]
    list_select_related = ["run"]
    raw_id_fields = ["run"]
    search_fields = ["output"]

    @admin.display(description="output")
    def excerpt(self, step: Step) -> str:
        return _short(step.output)


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["id", "root", "seq", "type", "at"]
    list_filter = ["type"]
    list_select_related = ["root"]
    raw_id_fields = ["root"]


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    list_display = ["id", "hostname", "pid", "started_at", "heartbeat_at", "stopped_at", "runs"]
    list_filter = ["hostname"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        return super().get_queryset(request).annotate(run_count=Count("runs"))

    @admin.display(description="runs", ordering="run_count")
    def runs(self, worker: Worker) -> int:
        return worker.run_count


@admin.register(Profile)
class ProfileAdmin(admin.ModelAdmin):
    list_display = ["id", "user", "subagents_enabled"]
    list_filter = ["subagents_enabled"]
    list_select_related = ["user"]
    raw_id_fields = ["user"]
    search_fields = ["user__username"]


# --- Knowledge base --------------------------------------------------------------------------


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "owner", "documents", "created_at"]
    list_select_related = ["owner"]
    raw_id_fields = ["owner"]
    search_fields = ["name", "description"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Dataset]:
        return super().get_queryset(request).annotate(document_count=Count("documents"))

    @admin.display(description="documents", ordering="document_count")
    def documents(self, dataset: Dataset) -> int:
        return dataset.document_count


class DocumentUploadForm(forms.ModelForm):
    """A file for a dataset, added by knowledge.document_add as the API adds it (extraction,
    sha256, chunks); what the service refuses shows on the form, on its field."""

    title = forms.CharField(
        required=False, max_length=500, help_text="Left empty: the file's name."
    )
    file = forms.FileField(help_text="A text, Markdown, HTML or PDF file.")

    class Meta:
        model = Document
        fields = ["dataset", "title"]

    def clean(self) -> dict:
        data = super().clean()
        upload, dataset = data.get("file"), data.get("dataset")
        if upload is None or dataset is None:
            return data
        # The service is the check: only it knows which files it can read. The admin's add
        # view runs in a transaction, so a page that fails after this adds nothing.
        try:
            knowledge.file_size_check(size=upload.size, filename=upload.name or "")
            self.document = knowledge.document_add(
                dataset=dataset,
                title=data.get("title", ""),
                data=upload.read(),
                filename=upload.name or "",
                content_type=upload.content_type,
            )
        except services.InvalidInput as error:
            self.add_error(error.field if error.field in self.fields else "file", error.message)
        return data


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "title",
        "dataset",
        "content_type",
        "chunks",
        "remembered_by",
        "created_at",
    ]
    list_filter = ["content_type"]
    list_select_related = ["dataset", "remembered_by"]
    raw_id_fields = ["dataset", "remembered_by"]
    search_fields = ["title", "source"]
    # The chunks and their search index are derived from the text when the document is
    # added: edits here would leave them stale, so text and dataset are fixed once added.
    readonly_fields = ["dataset", "text", "sha256", "remembered_by", "chunks", "created_at"]
    add_fields = ["dataset", "title", "file"]

    def get_fields(self, request: HttpRequest, obj: Document | None = None) -> list[str]:
        return self.add_fields if obj is None else super().get_fields(request, obj)

    def get_readonly_fields(self, request: HttpRequest, obj: Document | None = None) -> list:
        return [] if obj is None else super().get_readonly_fields(request, obj)

    def get_form(self, request: HttpRequest, obj: Document | None = None, **kwargs):
        if obj is None:
            kwargs["form"] = DocumentUploadForm
        return super().get_form(request, obj, **kwargs)

    def save_form(self, request: HttpRequest, form: forms.ModelForm, change: bool) -> Document:
        if change:
            return super().save_form(request, form, change)
        return form.document  # already stored, with its chunks, by the form's clean()

    def save_model(self, request: HttpRequest, obj: Document, form, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form, formsets, change: bool) -> None:
        if change:
            super().save_related(request, form, formsets, change)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Document]:
        return super().get_queryset(request).annotate(chunk_count=Count("chunks"))

    @admin.display(description="chunks", ordering="chunk_count")
    def chunks(self, document: Document) -> str:
        return format_html(
            '<a href="{}">{}</a>',
            _changelist_url(Chunk, document__id__exact=document.pk),
            document.chunk_count,
        )


@admin.register(Chunk)
class ChunkAdmin(ReadOnlyAdmin):
    list_display = ["id", "document", "position", "excerpt"]
    list_select_related = ["document"]
    raw_id_fields = ["document", "dataset"]
    search_fields = ["text"]

    @admin.display(description="text")
    def excerpt(self, chunk: Chunk) -> str:
        return _short(chunk.text)


@admin.register(Source)
class SourceAdmin(ReadOnlyAdmin):
    list_display = ["id", "kind", "title", "url", "run", "root", "fetched_at"]
    list_filter = ["kind"]
    list_select_related = ["run", "root"]
    raw_id_fields = ["run", "root"]
    search_fields = ["url", "final_url", "title"]


@admin.register(Citation)
class CitationAdmin(ReadOnlyAdmin):
    list_display = ["id", "url", "title", "verified", "run", "source"]
    list_filter = ["verified"]
    list_select_related = ["run", "source"]
    raw_id_fields = ["run", "source"]
    search_fields = ["url", "title"]
