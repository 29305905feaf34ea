"""What every admin page of Canopy shares: read-only pages and inlines for what agents write."""

from datetime import datetime

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.text import Truncator

# Django's own datetime format, to the second: an agent's states and steps come seconds
# apart, and the admin's default ("2:05 p.m.") shows them all at the same minute.
TO_THE_SECOND = "N j, Y, H:i:s"


def short(text: str, length: int = 80) -> str:
    return Truncator(text).chars(length)


def excerpt_of(field: str, length: int = 80):
    """A list or inline column with the start of a long text `field`, headed by its name."""

    @admin.display(description=field)
    def excerpt(self, record) -> str:
        return short(getattr(record, field), length)

    return excerpt


def to_the_second(moment: datetime | None) -> str:
    return date_format(timezone.localtime(moment), TO_THE_SECOND) if moment else "-"


def changelist_url(model: type, **filters: object) -> str:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    query = "&".join(f"{key}={value}" for key, value in filters.items())
    return f"{url}?{query}" if query else url


class AtTheSecond:
    """A record's `at` to the second, for its list or its inline."""

    @admin.display(description="at", ordering="at")
    def at_second(self, record) -> str:
        return to_the_second(record.at)


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
