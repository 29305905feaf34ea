"""Django's HTTP side under ASGI in one hop to the sync thread, not one per middleware.

Django's ASGIHandler builds its middleware chain in async mode. Each middleware written the
classic way (MiddlewareMixin: all of Django's own, django-prometheus's, django-csp's) then
runs its `process_request` and its `process_response` through `sync_to_async`, and the view
through one more: 25 crossings between the server's loop and the sync thread for one request
(docs/performance.md, issue 25, round eighteen). Each is asgiref's copy of the context, a
future and a thread woken: together about 40% of an API request's CPU.

Canopy's views and middlewares are all synchronous, so `OneHopHandler` loads the chain in
sync mode, as under WSGI, and runs the whole request (every middleware and the view) in one
`sync_to_async` call, on the same thread-sensitive thread as before. Static files keep
Django's own async handler: ServeStatic streams them asynchronously there, where a sync
chain would hand the server a sync file iterator to read in a thread.

Each request's sync code runs on a thread of its own, as Django wants (one request's
thread-sensitive calls on one thread, requests side by side). Django's handler makes that
thread for the request and, as the request ends, another that waits for it to exit: two
threads started a request, a seventh of an API read's CPU (issue 25, round twenty-six).
`RequestThreads` keeps them: a request takes an idle one (asgiref's ThreadSensitiveContext
with an executor, asgiref 3.13) and gives it back once everything it ran there has returned.
"""

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core.asgi import ASGIHandler
from django.core.handlers.asgi import get_script_prefix
from django.http import HttpRequest, HttpResponseBase
from servestatic.middleware import ServeStaticMiddleware

# Idle request threads kept beyond this many (after a burst of requests) end.
MOST_IDLE_THREADS = 16


class RequestThreads:
    """Single-thread executors for requests, kept between requests. Thread-safe: one is
    given back from its own thread."""

    def __init__(self) -> None:
        self._idle: list[ThreadPoolExecutor] = []
        self._lock = threading.Lock()

    def take(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return ThreadPoolExecutor(max_workers=1)

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        """After the request: kept once what the request left running on it has returned (a
        view goes on after its client left, and its request is cancelled)."""
        executor.submit(lambda: None).add_done_callback(lambda _: self._keep(executor))

    def _keep(self, executor: ThreadPoolExecutor) -> None:
        with self._lock:
            if len(self._idle) < MOST_IDLE_THREADS:
                self._idle.append(executor)
                return
        executor.shutdown(wait=False)  # its thread ends once this callback returns


class PooledThreads(ASGIHandler):
    """ASGIHandler whose requests run their sync code on kept threads (RequestThreads)."""

    def __init__(self) -> None:
        super().__init__()
        self.threads = RequestThreads()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self.threads.take()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self.threads.give_back(executor)


class OneHopHandler(PooledThreads):
    """ASGIHandler with the middleware chain and the view run in one go on the sync thread."""

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


class DjangoHttp:
    """The ASGI app of Django's HTTP side: static files through Django's async handler (as
    ServeStatic wants), every other request through OneHopHandler. A path is static as
    ServeStatic decides: its part after the script prefix (daphne's --root-path, or
    FORCE_SCRIPT_NAME) starts with ServeStatic's prefix."""

    def __init__(self) -> None:
        self.static_prefix = getattr(
            settings,
            "SERVESTATIC_STATIC_PREFIX",
            ServeStaticMiddleware.default_static_prefix(settings),
        )
        self.static = PooledThreads()
        self.requests = OneHopHandler()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        handler = self.static if self.is_static(scope) else self.requests
        await handler(scope, receive, send)

    def is_static(self, scope: dict[str, Any]) -> bool:
        root = get_script_prefix(scope).rstrip("/")
        return scope["path"].removeprefix(root).startswith(self.static_prefix)
