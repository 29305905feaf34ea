"""Throttles: how often one user (or, signed out, one address) may start researches, upload
documents, query a knowledge base, write notes, export, and try to sign in.

DRF's throttling on the API, with one scope per action and a rate per scope in
THROTTLE_RATES (settings, one variable each). Counters live in the default cache, which is
Redis when REDIS_URL is set, so every web process shares them. A throttled request is a 429
whose Retry-After header and detail say when to try again. The login pages ask the same
throttles through `page_throttle_wait`; starting a research is counted inside the start
service (research.services.start, `throttle_check`), whichever edge starts it.

When the counters cannot be read (Redis is down or does not answer within its socket
timeout), each scope fails by a choice made here, never with a 500:

- open, for starting researches, notes, uploads, knowledge queries and exports: the
  request goes on uncounted. Other limits still bound them (the working-roots limit, the
  body and file size limits, each user's share of the PDF printers), and refusing them
  would turn a cache outage into an outage of the product.
- closed, for sign-in: the one throttle that guards against password guessing, and an
  outage must not open an unlimited guessing window. `ThrottleUnavailable` is a 503 with
  Retry-After (JSON from the API; the login pages show it as a message). Signed-in users
  are not affected: sessions are in the database.

The first failure of an outage logs one warning and the return of the counters one info
line; every request let through or refused meanwhile is counted in the Prometheus counter
`canopy_throttle_unavailable_total{scope,outcome}`.
"""

import logging
import math
import threading
from types import SimpleNamespace

from django.conf import settings
from django.http import HttpRequest
from prometheus_client import Counter
from redis.exceptions import RedisError
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.throttling import SimpleRateThrottle

from research.errors import Throttled

log = logging.getLogger(__name__)

RESEARCH_START = "research_start"
UPLOADS = "uploads"
KNOWLEDGE_QUERIES = "knowledge_queries"
NOTES = "notes"
EXPORTS = "exports"
LOGIN = "login"
SCOPES = (RESEARCH_START, UPLOADS, KNOWLEDGE_QUERIES, NOTES, EXPORTS, LOGIN)
# The scopes refused, not let through, while their counters cannot be read.
FAIL_CLOSED = frozenset({LOGIN})
# What a cache that cannot reach its server raises (Django's Redis cache lets the client's
# errors through; OSError covers a socket that fails below it).
COUNTERS_UNAVAILABLE = (RedisError, OSError)
UNAVAILABLE_RETRY_SECONDS = 30

UNAVAILABLE = Counter(
    "canopy_throttle_unavailable",
    "Requests whose throttle could not read its counters, by scope and outcome "
    "(let_through when the scope fails open, refused when it fails closed).",
    ["scope", "outcome"],
)


class ThrottleUnavailable(APIException):
    """A fail-closed scope whose counters cannot be read: try again later."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "throttle_unavailable"

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what} is paused: the service that counts attempts is unavailable. "
            f"Try again in {UNAVAILABLE_RETRY_SECONDS} seconds."
        )
        self.wait = UNAVAILABLE_RETRY_SECONDS  # DRF's handler turns it into Retry-After


class _Outage:
    """Whether the counters are known to be unavailable, so that an outage logs once when it
    starts and once when it ends, not once per request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down = False

    def failed(self, error: Exception) -> None:
        with self._lock:
            if self._down:
                return
            self._down = True
        log.warning(
            "throttle counters are unavailable (%s): %s fail open, %s fail closed, "
            "until the cache answers again",
            error,
            ", ".join(scope for scope in SCOPES if scope not in FAIL_CLOSED),
            ", ".join(sorted(FAIL_CLOSED)),
        )

    def answered(self) -> None:
        if not self._down:  # the common case: no lock taken
            return
        with self._lock:
            if not self._down:
                return
            self._down = False
        log.info("throttle counters are available again: every scope counts")


_outage = _Outage()


class ScopedThrottle(SimpleRateThrottle):
    """Counts the requests of one scope, per user (per address when signed out), for the
    methods in `methods` only: a list of runs is not a start."""

    scope = ""
    unavailable_what = "This action"  # how ThrottleUnavailable names it
    methods: frozenset[str] = frozenset({"POST"})

    def allow_request(self, request, view) -> bool:
        try:
            allowed = super().allow_request(request, view)
        except COUNTERS_UNAVAILABLE as error:
            _outage.failed(error)
            if self.scope in FAIL_CLOSED:
                UNAVAILABLE.labels(self.scope, "refused").inc()
                raise ThrottleUnavailable(self.unavailable_what) from None
            UNAVAILABLE.labels(self.scope, "let_through").inc()
            return True
        _outage.answered()
        return allowed

    def get_rate(self) -> str | None:
        # Read on every request, not at import: tests and operators change the setting.
        return settings.THROTTLE_RATES.get(self.scope) or None

    def get_cache_key(self, request, view) -> str | None:
        if request.method not in self.methods:
            return None  # not throttled
        user = getattr(request, "user", None)
        ident = user.pk if user is not None and user.is_authenticated else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


def scoped(
    scope: str, *, methods: tuple[str, ...] = ("POST",), what: str = "This action"
) -> type[ScopedThrottle]:
    """The throttle class of a scope, for `@throttle_classes([...])`."""
    return type(
        f"{scope.title().replace('_', '')}Throttle",
        (ScopedThrottle,),
        {"scope": scope, "methods": frozenset(methods), "unavailable_what": what},
    )


ResearchStartThrottle = scoped(RESEARCH_START)
UploadThrottle = scoped(UPLOADS)
KnowledgeQueryThrottle = scoped(KNOWLEDGE_QUERIES, methods=("GET",))
NotesThrottle = scoped(NOTES, methods=("POST", "PUT", "PATCH"))
ExportThrottle = scoped(EXPORTS, methods=("GET",))
LoginThrottle = scoped(LOGIN, what="Signing in")


def user_throttle_wait(throttle: type[ScopedThrottle], user) -> int | None:
    """For a caller with no HTTP request of its own (a service, an MCP tool): the same count as
    the API's, per user. None if it may go on (and is counted), else the seconds to wait."""
    return page_throttle_wait(throttle, SimpleNamespace(method="POST", user=user))


def throttle_check(throttle: type[ScopedThrottle], user) -> None:
    """Count one attempt of `user` (research.services.start counts a start with it, MCP a
    note); raises Throttled when the rate is spent. A scope that fails open lets it through
    uncounted while the counters are down."""
    wait = user_throttle_wait(throttle, user)
    if wait is not None:
        raise Throttled(wait)


def page_throttle_wait(throttle: type[ScopedThrottle], request: HttpRequest) -> int | None:
    """For a page: None if the request may go on (and is counted), else the whole seconds
    to wait, rounded up as DRF's 429 rounds them (never an invitation to retry too early).
    Raises ThrottleUnavailable for a fail-closed scope whose counters are down."""
    checker = throttle()
    if checker.allow_request(request, None):
        return None
    return max(1, math.ceil(checker.wait() or 1))
