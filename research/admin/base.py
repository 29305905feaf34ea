"""What every admin page of Canopy shares: read-only pages and inlines for what agents write."""

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.text import Truncator


def short(text: str, length: int = 80) -> str:
    return Truncator(text).chars(length)


def changelist_url(model: type, **filters: object) -> str:
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
