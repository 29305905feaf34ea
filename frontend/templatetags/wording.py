"""`{% load wording %}`: moments as the analyst reads them on the pages."""

from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.timesince import timesince

register = template.Library()


@register.filter
def ago(moment: datetime | None) -> str:
    """`3 minutes ago`, or `just now` under a minute, where Django's timesince says
    "0 minutes" (a moment a little ahead of this clock is just now too)."""
    if moment is None:
        return ""
    if timezone.now() - moment < timedelta(minutes=1):
        return "just now"
    return f"{timesince(moment)} ago"
