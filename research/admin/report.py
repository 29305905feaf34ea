"""A run's report as staff read it in the admin: Markdown rendered and sanitised as the run
page renders it (research.markdown), without the page's citation marks."""

from django.utils.safestring import SafeString, mark_safe

from research.markdown import markdown, sanitize


def report_html(text: str) -> SafeString:
    """The report as safe HTML: a report is text a model wrote from pages it read."""
    return mark_safe(sanitize(markdown().render(text or "")))  # sanitised by nh3
