"""`{% load wording %}`: moments and a research's badge as the analyst reads them."""

from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.timesince import timesince

from frontend import library

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


@register.filter
def status_label(run) -> str:
    """A research's badge in words (frontend.library.status_label): "needs your review"."""
    return library.status_label(run)


@register.filter
def status_tone(run) -> str:
    """Its badge's colour class (frontend.library.status_tone)."""
    return library.status_tone(run)
