"""The admin of what agents record about runs: states, messages, steps, usage, events,
workers, and the per-user switches (Profiles)."""

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from research.admin.base import AtTheSecond, ReadOnlyAdmin, excerpt_of
from research.models import Event, LLMCall, Message, Profile, RunState, Step, Worker


@admin.register(RunState)
class RunStateAdmin(AtTheSecond, ReadOnlyAdmin):
    list_display = ["id", "run", "state", "detail", "at_second"]
    list_filter = ["state"]
    list_select_related = ["run"]
    raw_id_fields = ["run"]
    search_fields = ["detail"]


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ["id", "from_run", "author", "to_run", "excerpt", "sent_at", "read_at"]
    list_select_related = ["from_run", "author", "to_run"]
    raw_id_fields = ["from_run", "to_run"]
    search_fields = ["text"]
    excerpt = excerpt_of("text")


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
class StepAdmin(AtTheSecond, ReadOnlyAdmin):
    list_display = ["id", "run", "kind", "tool", "is_error", "excerpt", "at_second"]
    list_filter = ["kind", "tool", "is_error"]
    list_select_related = ["run"]
    raw_id_fields = ["run"]
    search_fields = ["output"]
    excerpt = excerpt_of("output")


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
