"""Throttles: how often one user (or, signed out, one address) may start researches, upload
documents, query a knowledge base, write notes, and try to sign in.

DRF's throttling on the API, with one scope per action and a rate per scope in
THROTTLE_RATES (settings, one variable each). Counters live in the default cache, which is
Redis when REDIS_URL is set, so every web process shares them. A throttled request is a 429
whose Retry-After header and detail say when to try again. The pages (start form, login)
ask the same throttles through `page_throttle_wait`.
"""

from types import SimpleNamespace

from django.conf import settings
from django.http import HttpRequest
from rest_framework.throttling import SimpleRateThrottle

RESEARCH_START = "research_start"
UPLOADS = "uploads"
KNOWLEDGE_QUERIES = "knowledge_queries"
NOTES = "notes"
LOGIN = "login"
SCOPES = (RESEARCH_START, UPLOADS, KNOWLEDGE_QUERIES, NOTES, LOGIN)


class ScopedThrottle(SimpleRateThrottle):
    """Counts the requests of one scope, per user (per address when signed out), for the
    methods in `methods` only: a list of runs is not a start."""

    scope = ""
    methods: frozenset[str] = frozenset({"POST"})

    def get_rate(self) -> str | None:
        # Read on every request, not at import: tests and operators change the setting.
        return settings.THROTTLE_RATES.get(self.scope) or None

    def get_cache_key(self, request, view) -> str | None:
        if request.method not in self.methods:
            return None  # not throttled
        user = getattr(request, "user", None)
        ident = user.pk if user is not None and user.is_authenticated else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


def scoped(scope: str, *, methods: tuple[str, ...] = ("POST",)) -> type[ScopedThrottle]:
    """The throttle class of a scope, for `@throttle_classes([...])`."""
    return type(
        f"{scope.title().replace('_', '')}Throttle",
        (ScopedThrottle,),
        {"scope": scope, "methods": frozenset(methods)},
    )


ResearchStartThrottle = scoped(RESEARCH_START)
UploadThrottle = scoped(UPLOADS)
KnowledgeQueryThrottle = scoped(KNOWLEDGE_QUERIES, methods=("GET",))
NotesThrottle = scoped(NOTES, methods=("POST", "PUT", "PATCH"))
LoginThrottle = scoped(LOGIN)


def user_throttle_wait(throttle: type[ScopedThrottle], user) -> int | None:
    """For a caller with no HTTP request of its own (an MCP tool): the same count as the
    API's, per user. None if it may go on (and is counted), else the seconds to wait."""
    return page_throttle_wait(throttle, SimpleNamespace(method="POST", user=user))


def throttled_text(wait: int) -> str:
    """What DRF's 429 says, for callers that answer in text (MCP tool errors)."""
    return f"Request was throttled. Expected available in {wait} second{'s' if wait != 1 else ''}."


def page_throttle_wait(throttle: type[ScopedThrottle], request: HttpRequest) -> int | None:
    """For a page: None if the request may go on (and is counted), else the whole seconds
    to wait."""
    checker = throttle()
    if checker.allow_request(request, None):
        return None
    return max(1, round(checker.wait() or 1))
