"""The site's own 404 and 500 pages (templates/404.html, 500.html), with DEBUG off as in
production; the API keeps its JSON 404."""

import json
import os

import pytest
from django.template.loader import render_to_string
from django.test import RequestFactory
from django.urls import get_resolver
from django.views.defaults import server_error

from tests.test_browser import browser, server  # noqa: F401  (fixtures)

SHOTS = os.environ.get("CANOPY_SCREENSHOTS")  # a folder: the pages are saved there to look at


@pytest.fixture(autouse=True)
def production(settings):
    settings.DEBUG = False


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/no/such/page", "/runs/999999/"])
def test_a_missing_page_is_the_sites_own_404(client, alice, path):
    client.force_login(alice)

    response = client.get(path)

    page = response.content.decode()
    assert response.status_code == 404
    assert "This page does not exist" in page
    assert "canopy.css" in page and "Signed in as <strong>alice</strong>" in page
    assert 'href="/"' in page
    assert "<style" not in page and "<script>" not in page  # the CSP allows neither inline
    assert "unsafe-inline" not in response["Content-Security-Policy"]


@pytest.mark.django_db
def test_an_actions_address_opened_as_a_page_says_so_and_links_back(client, alice, run_factory):
    """The page's buttons post to /runs/7/star, /runs/7/follow-up...: opened in a browser
    (a reload after a form's error, a copied address) each was an empty 405, which Chromium
    shows as its own "HTTP ERROR 405"."""
    client.force_login(alice)
    run = run_factory(owner=alice)

    for action in ("star", "follow-up", "delete", "again"):
        response = client.get(f"/runs/{run.pk}/{action}", HTTP_ACCEPT="text/html")
        page = response.content.decode()
        assert response.status_code == 405, action
        assert response["Allow"] == "POST"
        assert "This address is an action, not a page" in page
        assert f'href="/runs/{run.pk}/">Back to where it belongs' in page
    # An action deeper down goes back to the nearest page above it.
    delete = client.post("/kb/", {"name": "Birds"})
    dataset = delete.url.rstrip("/").rsplit("/", 1)[1]
    page = client.get(f"/kb/{dataset}/documents/9/delete", HTTP_ACCEPT="text/html")
    assert f'href="/kb/{dataset}/">Back to where it belongs' in page.content.decode()
    # Not for a client that asked for no page, nor under the API, whose answers are JSON.
    assert client.get(f"/runs/{run.pk}/star").content == b""
    api = client.get(f"/v1/gb/research/{run.pk}/cancel")
    assert api.status_code == 405 and api.json()["detail"]


def test_the_favicon_browsers_ask_for_is_the_sites_icon(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 302  # its hashed name changes with each collectstatic
    assert response["Location"].endswith("/favicon.svg")


@pytest.mark.django_db
def test_a_missing_api_path_is_still_json(client, alice):
    client.force_login(alice)

    response = client.get("/v1/gb/no-such-thing")

    assert response.status_code == 404
    assert response.json() == {"detail": "no such API path: /v1/gb/no-such-thing"}


def test_an_api_500_is_json_and_the_sites_500_a_page():
    """A script reading the API got the site's HTML page on a 500."""
    handler = get_resolver().resolve_error_handler(500)
    api = handler(RequestFactory().get("/v1/gb/research?until=2026-01-01"))
    site = handler(RequestFactory().get("/runs/1/"))
    assert (api.status_code, api["Content-Type"]) == (500, "application/json")
    assert json.loads(api.content) == {
        "detail": "A server error occurred; it was logged for the team. Try again later."
    }
    assert site.status_code == 500 and "Something went wrong on our side" in site.content.decode()


def test_the_500_page_renders_without_a_request_context_or_the_database():
    """No django_db mark: any query here fails the test (pytest-django blocks the database)."""
    response = server_error(RequestFactory().get("/runs/1/"))

    page = response.content.decode()
    assert response.status_code == 500
    assert "Something went wrong on our side" in page
    assert "canopy.css" in page and 'href="/"' in page
    assert "Signed in" not in page and "<style" not in page and "<script>" not in page


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_error_pages_read_well_on_a_laptop_and_a_phone(browser, server, tmp_path):  # noqa: F811
    broken = render_to_string("500.html")
    for width, height in ((1440, 900), (390, 844)):
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        # The 500 page as daphne would send it, served from the site so its stylesheet loads.
        page.route(
            f"{server.url}/broken",
            lambda route: route.fulfill(status=500, body=broken, content_type="text/html"),
        )
        for name, path, heading in (
            ("405", "/logout/", "This address is an action, not a page"),
            ("404", "/no/such/page", "This page does not exist"),
            ("500", "/broken", "Something went wrong on our side"),
        ):
            response = page.goto(f"{server.url}{path}")
            assert response.status == int(name)
            title = page.get_by_role("heading", level=1)
            assert title.inner_text() == heading
            box = title.bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
            link = page.get_by_role("link", name="Back to your research")
            assert link.is_visible()
            header = page.locator(".site-header").evaluate("e => getComputedStyle(e).display")
            assert header == "flex", "the stylesheet did not load"
            folder = SHOTS or tmp_path
            page.screenshot(path=os.path.join(folder, f"error-{name}-{width}.png"))
        context.close()
