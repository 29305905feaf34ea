"""Django's HTTP side in one hop to its sync thread (research/ops/http.py): every middleware
still does its part, a request crosses from the loop to the sync thread once where Django's
own handler crossed at every middleware, and static files still stream asynchronously."""

import asyncio
import warnings

import httpx
import pytest
from asgiref.sync import SyncToAsync
from django.core.asgi import ASGIHandler
from rest_framework.authtoken.models import Token

from research.ops.http import DjangoHttp

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
