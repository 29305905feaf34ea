"""Django's HTTP side in one hop to its sync thread (research/ops/http.py): every middleware
still does its part, a request crosses from the loop to the sync thread once where Django's
own handler crossed at every middleware, and static files still stream asynchronously."""

import asyncio
import threading
import time
import warnings

import httpx
import pytest
from asgiref.sync import SyncToAsync
from django.core.asgi import ASGIHandler
from django.core.signals import request_started
from rest_framework.authtoken.models import Token

from research.ops.http import MOST_IDLE_THREADS, DjangoHttp, RequestThreads

pytestmark = pytest.mark.django_db(transaction=True)


def _get(app, path: str, root_path: str = "", **kwargs) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, root_path=root_path)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            return await client.request(kwargs.pop("method", "GET"), path, **kwargs)

    return asyncio.run(go())


def _crossings(monkeypatch, app, path: str, **kwargs) -> tuple[httpx.Response, int]:
    """The response, and how many times the request crossed to a sync thread."""
    crossings = 0
    crossing = SyncToAsync.__call__

    def counted(self, *args, **kw):
        nonlocal crossings
        crossings += 1
        return crossing(self, *args, **kw)

    with monkeypatch.context() as patch:
        patch.setattr(SyncToAsync, "__call__", counted)
        response = _get(app, path, **kwargs)
    return response, crossings


def test_an_api_request_crosses_to_the_sync_thread_once_with_every_middleware_at_work(
    monkeypatch, alice
):
    token = Token.objects.create(user=alice).key
    auth = {"Authorization": f"Token {token}"}
    ours, few = _crossings(monkeypatch, DjangoHttp(), "/v1/gb/research", headers=auth)
    django, many = _crossings(monkeypatch, ASGIHandler(), "/v1/gb/research", headers=auth)

    assert (ours.status_code, django.status_code) == (200, 200)
    assert ours.json() == django.json()
    # The request_started signal, the request itself (every middleware and the view), the
    # response's close; Django's own handler adds one for each middleware's process_request
    # and process_response.
    assert few <= 3
    assert many > 20
    # The middlewares' headers (security, CSP, clickjacking) are all there, as before.
    for name in ("X-Content-Type-Options", "Content-Security-Policy", "X-Frame-Options"):
        assert ours.headers[name] == django.headers[name], name


def test_pages_keep_their_session_csrf_and_not_found_answers():
    app = DjangoHttp()
    login = _get(app, "/login/")
    assert login.status_code == 200 and "csrftoken" in login.cookies
    # A form posted without its CSRF token is refused by the middleware, as before.
    refused = _get(app, "/login/", method="POST", data={"username": "a", "password": "b"})
    assert refused.status_code == 403
    assert _get(app, "/no-such-page/").status_code == 404
    # An API call without a token is the API's 401/403, not an error of the handler.
    assert _get(app, "/v1/gb/research").status_code in (401, 403)


def test_static_files_still_stream_from_the_async_handler_without_a_warning():
    app = DjangoHttp()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        response = _get(app, "/static/canopy.css")
    assert response.status_code == 200
    assert b"{" in response.content  # a stylesheet
    assert not [w for w in caught if "synchronous iterators" in str(w.message)]


def test_behind_a_script_prefix_static_files_and_pages_still_find_their_handler():
    """daphne --root-path /canopy: the path keeps the prefix, and ServeStatic matches what
    follows it; so does the routing."""
    app = DjangoHttp()
    assert app.is_static({"path": "/canopy/static/canopy.css", "root_path": "/canopy"})
    assert not app.is_static({"path": "/canopy/login/", "root_path": "/canopy"})
    css = _get(app, "/canopy/static/canopy.css", root_path="/canopy")
    assert css.status_code == 200 and b"{" in css.content
    assert _get(app, "/canopy/login/", root_path="/canopy").status_code == 200


async def _given_back(app, path: str) -> None:
    """Until the thread of `path`'s request is kept again: it is given back once a no-op
    queued behind the request has run there, and on a busy machine the next request could
    come first and take a new one (a flake once in CI). What one request after another
    means here is one after the last gave its thread back."""
    handler = app.static if app.is_static({"path": path, "root_path": ""}) else app.requests
    for _ in range(400):
        if handler.threads._idle:
            return
        await asyncio.sleep(0.005)


def _threads_of_requests(app, paths: list[str], at_once: bool) -> list[str]:
    """The thread each request's sync code started on (Django's request_started receivers
    run there), requests one after another or all at once."""
    seen: list[str] = []
    # At once, each waits for the others on its thread: requests sharing a thread would
    # never all get there.
    together = threading.Barrier(len(paths), timeout=10) if at_once else None

    def note(**kwargs) -> None:
        seen.append(threading.current_thread().name)  # unique to its executor
        if together is not None:
            together.wait()

    async def go() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            if at_once:
                await asyncio.gather(*(client.get(path) for path in paths))
            else:
                for path in paths:
                    await client.get(path)
                    await _given_back(app, path)

    request_started.connect(note, dispatch_uid="test-threads-of-requests")
    try:
        asyncio.run(go())
    finally:
        request_started.disconnect(dispatch_uid="test-threads-of-requests")
    return seen


def test_requests_one_after_another_reuse_one_thread_and_start_none(monkeypatch):
    app = DjangoHttp()
    paths = ["/login/", "/static/canopy.css"]
    _threads_of_requests(app, paths, at_once=False)  # the first of each makes its thread
    # Every thread started from now on, with the thread that started it. Only those the
    # requests' code started count: another test's leftover pool or timer may start one
    # meanwhile on a busy worker (counting every thread of the process failed once in CI).
    started: list[tuple[str, threading.Thread]] = []
    start = threading.Thread.start

    def noted(thread: threading.Thread) -> None:
        started.append((threading.current_thread().name, thread))
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", noted)

    seen = _threads_of_requests(app, paths * 5, at_once=False)

    assert len(seen) == 10 and len(set(seen)) == 2  # the pages' thread, the static files'
    # No thread started for a request, from the loop's thread (asyncio.run's, which joins an
    # executor used on its way out with one more) or from the requests' own; ServeStatic
    # starts one to read each file.
    ours = {threading.current_thread().name, *seen}
    assert [
        thread.name
        for starter, thread in started
        if starter in ours and not thread.name.startswith("ServeStatic")
    ] == []


def test_requests_at_once_still_run_side_by_side_on_threads_of_their_own():
    """Each request's sync code on a thread of its own, as Django's handler does it: a slow
    view does not hold up the requests beside it (each waits here until all four run)."""
    app = DjangoHttp()
    _threads_of_requests(app, ["/login/"] * 2, at_once=False)  # an idle thread is kept
    seen = _threads_of_requests(app, ["/login/"] * 4, at_once=True)
    assert len(set(seen)) == 4


def test_a_thread_still_running_a_request_is_not_given_to_the_next_one():
    """A view goes on after its client left (its request is cancelled): its thread waits
    for it to return before it serves another request."""
    threads = RequestThreads()
    busy = threads.take()
    release = threading.Event()
    running = busy.submit(release.wait, 10)
    threads.give_back(busy)

    other = threads.take()
    assert other is not busy
    threads.give_back(other)
    release.set()
    running.result(timeout=10)
    deadline = time.monotonic() + 10
    while busy not in threads._idle and time.monotonic() < deadline:
        time.sleep(0.01)
    assert busy in threads._idle  # kept once its view returned


def test_after_a_burst_only_a_few_idle_threads_are_kept():
    threads = RequestThreads()
    taken = [threads.take() for _ in range(MOST_IDLE_THREADS + 5)]
    for executor in taken:
        threads.give_back(executor)
    deadline = time.monotonic() + 10
    ended: list = []
    while len(ended) < 5 and time.monotonic() < deadline:  # each given back from its thread
        time.sleep(0.01)
        ended = [executor for executor in taken if executor._shutdown]
    assert len(threads._idle) == MOST_IDLE_THREADS
    assert len(ended) == 5 and not set(ended) & set(threads._idle)
