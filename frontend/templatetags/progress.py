"""`{% load progress %}`: progress at a glance in the pages (frontend/progress.py)."""

from django import template

from frontend.progress import agents_text

register = template.Library()


@register.filter
def progress_of(progress_by_id: dict, run_id: int):
    return progress_by_id.get(run_id)


@register.filter
def agents_done(progress) -> str:
    return agents_text(progress) if progress else ""
