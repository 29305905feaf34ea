"""The admin of remote MCP servers. Their headers are secrets: the form never shows them
back (only their names, the values masked); typing new ones replaces them, an empty field
keeps them."""

from django import forms
from django.contrib import admin
from django.utils.html import format_html_join

from research.errors import InvalidInput
from research.models import RemoteServer
from research.services.remote import remote_kinds_check

MASK = "••••••••"
HEADERS_HELP = (
    "One header a line, as <code>Name: value</code> (e.g. <code>Authorization: Bearer "
    "KEY</code>). Saved headers are never shown again: leave this empty to keep them, write "
    "<code>-</code> to remove them all."
)


def masked(headers: dict) -> str:
    return ", ".join(f"{name}: {MASK}" for name in headers) or "(none)"


def _names(value: object, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise forms.ValidationError(f'{field} must be a JSON list of names, e.g. ["search"].')
    return [item.strip() for item in value if item.strip()]


class RemoteServerForm(forms.ModelForm):
    url = forms.URLField(
        max_length=500,
        assume_scheme="https",
        help_text=RemoteServer._meta.get_field("url").help_text,
    )
    new_headers = forms.CharField(
        label="Headers",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}),
        help_text=HEADERS_HELP,
    )

    class Meta:
        model = RemoteServer
        fields = ["name", "url", "new_headers", "allowed_tools", "allowed_kinds", "enabled"]

    def clean_new_headers(self) -> dict[str, str] | None:
        text = self.cleaned_data["new_headers"].strip()
        if not text:
            return None  # keep the saved ones
        if text == "-":
            return {}
        headers = {}
        for number, line in enumerate(text.splitlines(), start=1):
            name, colon, value = line.partition(":")
            if not line.strip():
                continue
            if not colon or not name.strip() or " " in name.strip():
                raise forms.ValidationError(f"line {number} is not `Name: value`.")
            headers[name.strip()] = value.strip()
        return headers

    def clean_allowed_tools(self) -> list[str]:
        return _names(self.cleaned_data["allowed_tools"], "allowed tools")

    def clean_allowed_kinds(self) -> list[str]:
        kinds = _names(self.cleaned_data["allowed_kinds"], "allowed kinds")
        try:
            return remote_kinds_check(kinds=kinds)
        except InvalidInput as error:
            raise forms.ValidationError(error.message) from None

    def save(self, commit: bool = True) -> RemoteServer:
        server = super().save(commit=False)
        if self.cleaned_data.get("new_headers") is not None:
            server.headers = self.cleaned_data["new_headers"]
        if commit:
            server.save()
        return server


@admin.register(RemoteServer)
class RemoteServerAdmin(admin.ModelAdmin):
    form = RemoteServerForm
    list_display = [
        "name",
        "url",
        "enabled",
        "allowed_tools",
        "allowed_kinds",
        "catalog_checked_at",
    ]
    readonly_fields = ["saved_headers", "tools", "catalog_checked_at", "catalog_error"]
    fieldsets = [
        (None, {"fields": ["name", "url", "enabled"]}),
        ("Secrets", {"fields": ["saved_headers", "new_headers"]}),
        ("Who may use what", {"fields": ["allowed_tools", "allowed_kinds"]}),
        (
            "Tools the server lists (loaded by the agents when they start)",
            {"fields": ["tools", "catalog_checked_at", "catalog_error"]},
        ),
    ]

    @admin.display(description="saved headers")
    def saved_headers(self, server: RemoteServer) -> str:
        return masked(server.headers or {})

    @admin.display(description="tools")
    def tools(self, server: RemoteServer) -> str:
        if not server.catalog:
            return "(not loaded yet)"
        return format_html_join(
            "\n",
            "<div><code>{}</code> {}</div>",
            ((entry["name"], (entry.get("description") or "")[:160]) for entry in server.catalog),
        )
