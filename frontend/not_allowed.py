"""A page for an action's address opened as a page.

The page's buttons post to addresses such as /runs/7/star or /runs/7/follow-up; opened in
a browser (a reload after a form's error, a copied address, a bookmark) each answered 405
with an empty body, which Chromium shows as its own "HTTP ERROR 405". A browser gets a page
that says what happened and links back to what it was on; the API keeps its JSON answers.
"""

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.shortcuts import render
from django.urls import Resolver404, resolve


class ActionAddressMiddleware:
    """In the sync chain of every page; a pass-through in the async chain of static files
    (research/ops/http.py), which no action reaches. A sync-only middleware there would
    turn the chain's inner part sync, and ServeStatic's middleware off with it."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.passing = iscoroutinefunction(get_response)
        if self.passing:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.passing:
            return self.get_response(request)
        response = self.get_response(request)
        if response.status_code != 405 or getattr(response, "streaming", False):
            return response
        if response.content or request.path_info.startswith("/v1/"):  # the API's own words
            return response
        if "text/html" not in request.headers.get("Accept", ""):
            return response
        above = _page_above(request.path_info)
        back = request.META.get("SCRIPT_NAME", "").rstrip("/") + above  # under a prefix too
        page = render(request, "405.html", {"back": back, "to_list": above == "/"}, status=405)
        page["Allow"] = response.get("Allow", "")
        return page


def _page_above(path: str) -> str:
    """The page the action belongs to: the nearest address above it that is one
    (/runs/7/follow-up -> /runs/7/, /kb/7/documents/80/delete -> /kb/7/); else the list."""
    parts = path.strip("/").split("/")[:-1]
    while parts:
        above = "/" + "/".join(parts) + "/"
        parts.pop()
        try:
            if resolve(above).url_name not in FRAGMENTS:
                return above
        except Resolver404:
            continue
    return "/"


# Parts a page loads into itself (a run's report, an agent's panel, a documents list): bare.
FRAGMENTS = {"run-report", "agent-panel", "knowledge-documents"}
