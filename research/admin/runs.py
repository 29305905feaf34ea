"""The admin of runs: each run's page with its tree and records inline, and the list of them
all (what agents record about runs has its own lists, `records`)."""

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.auth import get_user_model
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet
from django.http import HttpRequest
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from research import pricing, services
from research.admin.base import AtTheSecond, ReadOnlyInline, changelist_url, excerpt_of, short
from research.admin.report import report_html
from research.endings import ending_of
from research.models import (
    ACTIVE_STATUSES,
    Citation,
    Event,
    LLMCall,
    Message,
    Plan,
    Run,
    RunState,
    Source,
    Status,
    Step,
)


class ChildInline(ReadOnlyInline):
    model = Run
    fk_name = "parent"
    verbose_name = "sub-agent"
    verbose_name_plural = "sub-agents"
    fields = [
        "name",
        "kind",
        "tier",
        "status",
        "state",
        "steps",
        "cost_usd",
        "tree_cost_usd",
        "reason",
    ]
    readonly_fields = fields
    ordering = ["id"]


class RunStateInline(AtTheSecond, ReadOnlyInline):
    model = RunState
    fields = ["state", "detail", "at_second"]
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
    # A note from the analyst has an author and no sending run.
    fields = ["from_run", "author", "text", "sent_at", "read_at"]
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        return super().get_queryset(request).select_related("from_run", "author")


class StepInline(AtTheSecond, ReadOnlyInline):
    model = Step
    verbose_name = "step"
    verbose_name_plural = "transcript"
    fields = ["kind", "tool", "input", "output_excerpt", "is_error", "at_second"]
    readonly_fields = fields
    output_excerpt = excerpt_of("output", 300)


class LLMCallInline(ReadOnlyInline):
    model = LLMCall
    fk_name = "run"
    verbose_name = "LLM call"
    verbose_name_plural = "LLM calls"
    fields = ["model", "input_tokens", "output_tokens", "cost_usd", "latency_ms", "at"]
    readonly_fields = fields


class ModelFilter(admin.SimpleListFilter):
    """The models with a price: listed without reading every run (Django's own filter runs a
    SELECT DISTINCT over the whole table on every page)."""

    title = "model"
    parameter_name = "model"

    def lookups(self, request, model_admin):
        return [(name, name) for name in pricing.known_models()]

    def queryset(self, request, queryset):
        return queryset.filter(model=self.value()) if self.value() else queryset


class PlanInline(admin.TabularInline):
    """A root's plan, every version: the history is kept."""

    model = Plan
    fields = ["version", "items", "author", "approved_at", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name_plural = "plan versions"

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class DepthFilter(admin.SimpleListFilter):
    """Root or generation N, up to the settings' limit, without reading every run."""

    title = "depth"
    parameter_name = "depth"

    def lookups(self, request, model_admin):
        depths = range(settings.RESEARCH_MAX_SUBAGENT_DEPTH + 1)
        return [(str(depth), "root" if depth == 0 else str(depth)) for depth in depths]

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        try:
            return queryset.filter(depth=int(self.value()))
        except ValueError:
            raise IncorrectLookupParameters(
                f"depth must be a number, not {self.value()!r}"
            ) from None


class OwnerFilter(admin.SimpleListFilter):
    """Whose runs: the viewer's own, or the owner chosen by a click on a name in the list.
    Django's filter of a key lists every user (a thousand links on each page of a busy
    server); this one reads at most the chosen owner."""

    title = "owner"
    parameter_name = "owner"

    def owner_id(self) -> int | None:
        """The chosen owner's id; None when none is chosen. A value that is no id (a word, a
        superscript digit, thousands of digits) is refused as the admin refuses a filter."""
        value = self.value()
        if not value:
            return None
        if not (value.isascii() and value.isdigit() and len(value) <= 20):
            raise IncorrectLookupParameters(f"owner must be a user's id, not {value[:40]!r}")
        return int(value)

    def lookups(self, request, model_admin):
        choices = [(str(request.user.pk), "me")]
        chosen = self.owner_id()
        if chosen is not None and chosen != request.user.pk:
            user = get_user_model().objects.filter(pk=chosen).first()
            choices.append((str(chosen), str(user) if user else f"user {chosen}"))
        return choices

    def queryset(self, request, queryset):
        chosen = self.owner_id()
        return queryset if chosen is None else queryset.filter(owner_id=chosen)


def owner_link(request: HttpRequest):
    """The list's owner column: each owner's name, a link to the same page of the list (its
    search, filters, order, and the popup of a form's run lookup kept) with that owner
    chosen (OwnerFilter)."""

    @admin.display(description="owner", ordering="owner__username")
    def owner_shown(run: Run) -> SafeString:
        query = request.GET.copy()
        query.pop("p", None)  # the first page of that owner's runs
        query["owner"] = str(run.owner_id)
        return format_html('<a href="?{}">{}</a>', query.urlencode(), run.owner)

    return owner_shown


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "label",
        "owner",  # a link to the owner's runs (owner_link)
        "status_shown",
        "ending",
        "state",
        "depth",
        "kind",
        "tier",
        "model",
        "steps",
        "cost_usd",
        "tree_cost_usd",
        "created_at",
    ]
    list_display_links = ["id", "label"]
    list_filter = ["status", "state", ModelFilter, DepthFilter, "starred", OwnerFilter]
    search_fields = ["topic", "name", "report", "owner__username"]
    list_select_related = ["owner"]
    # One count a page, not two: at 100,000 runs each is a scan of the table.
    show_full_result_count = False
    # Each cell of a row costs the admin about 50 us to render: 100 rows of 14 columns were
    # most of the list's time (bench/admin_list.py).
    list_per_page = 50
    # Every field shown is read-only. The first three sets are fixed by run_start and the spawn
    # (and the worker by the claim), never edited by hand: the events and messages endpoints
    # trust root_id, the owner decides who sees the whole tree, and pricing.cost raises for a
    # model with no price. The rest is written by the services and the agents.
    fieldsets = [
        (None, {"fields": ["owner", "name", "reason", "topic", "dataset", "max_steps"]}),
        (
            "Delegation",
            {
                "fields": [
                    *["kind", "tier", "model", "tools", "plan_item"],
                    *["review_plan", "clarify", "clarification"],
                ]
            },
        ),
        ("Tree", {"fields": ["parent", "root", "follows", "depth", "worker", "records"]}),
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
                    "notes_pending",
                ]
            },
        ),
        ("Result", {"fields": ["ending", "report_shown", "error", "flagged_claims", "report"]}),
        ("Times", {"fields": ["created_at", "started_at", "finished_at"]}),
    ]
    readonly_fields = flatten_fieldsets(fieldsets)
    inlines = [
        PlanInline,
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

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        # Whose review a paused research waits for, read with the row, not one query a row.
        mine = ExpressionWrapper(Q(owner_id=request.user.pk), output_field=BooleanField())
        return super().get_queryset(request).annotate(viewer_owns=mine)

    def view_on_site(self, run: Run) -> str:
        """The research's live page: a sub-agent is shown in its root's tree."""
        return reverse("run", args=[run.root_id or run.pk])

    def get_list_display(self, request: HttpRequest) -> list:
        return [owner_link(request) if name == "owner" else name for name in self.list_display]

    @admin.display(description="status", ordering="status")
    def status_shown(self, run: Run) -> str:
        if run.status != Status.PAUSED:
            return run.status
        return "waiting for you" if run.viewer_owns else f"waiting for {run.owner}"

    @admin.display(description="ending", ordering="error")
    def ending(self, run: Run) -> str:
        return ending_of(status=run.status, error=run.error).replace("_", " ") or "-"

    @admin.display(description="report, rendered")
    def report_shown(self, run: Run) -> SafeString | str:
        return report_html(run.report) if run.report else "-"

    @admin.display(description="name / topic")
    def label(self, run: Run) -> str:
        return run.name or short(run.topic, 60)

    @admin.display(description="records")
    def records(self, run: Run) -> str:
        """Links to the full lists (the inlines show a run's own rows; events are per tree)."""
        if run.pk is None:
            return "-"
        links = [
            ("sub-agents", changelist_url(Run, parent__id__exact=run.pk)),
            ("whole tree", changelist_url(Run, root__id__exact=run.root_id or run.pk)),
            ("events of the tree", changelist_url(Event, root__id__exact=run.root_id or run.pk)),
            ("transcript", changelist_url(Step, run__id__exact=run.pk)),
            ("LLM calls", changelist_url(LLMCall, run__id__exact=run.pk)),
            ("sources", changelist_url(Source, run__id__exact=run.pk)),
            ("citations", changelist_url(Citation, run__id__exact=run.pk)),
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

    def delete_view(self, request: HttpRequest, object_id: str, extra_context=None):
        """A research is deleted whole (services.run_delete): a sub-agent's delete page sends
        the admin back to it, saying so. (Not has_delete_permission: Django asks it of every
        sub-agent a research's delete takes with it.)"""
        run = self.get_object(request, object_id)
        if run is not None and not run.is_root:
            self.message_user(
                request,
                f"Run {run.pk} is a sub-agent of research {run.root_id}: a research is deleted "
                "whole, with its sub-agents.",
                messages.ERROR,
            )
            return redirect(reverse("admin:research_run_change", args=[run.pk]))
        return super().delete_view(request, object_id, extra_context)

    def delete_model(self, request: HttpRequest, obj: Run) -> None:
        services.run_delete(run=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        """The selected researches, each whole; a selected sub-agent goes with its research
        or, its research not selected, stays, and the message says so."""
        roots = list(queryset.filter(parent__isnull=True))
        kept = queryset.exclude(parent__isnull=True).exclude(root__in=roots).count()
        for run in roots:
            services.run_delete(run=run)
        if kept:
            self.message_user(
                request,
                f"Kept {kept} sub-agent{'s' if kept != 1 else ''} whose research was not "
                "selected: a research is deleted whole, with its sub-agents.",
                messages.WARNING,
            )
