"""The Content Security Policy in Debian's Chromium against a real daphne: every page loads
with no violation (no inline script or style, nothing from another origin), and the dark
theme follows the system's setting."""

import re

import pytest
from playwright.sync_api import expect

from agents.llm.scripted import call, reply
from research import services
from tests.test_browser import (  # noqa: F401  (fixtures)
    browser,
    log_in,
    server,
    start_research,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (event) => {
  const where = `${event.sourceFile}:${event.lineNumber}`;
  window.__csp.push(`${event.violatedDirective} ${event.blockedURI} ${where}`);
});
"""
TOPIC = "How do beavers choose where to build?"


def visit(page, url: str, console: list[str]) -> list[str]:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    return page.evaluate("window.__csp") + [line for line in console if "Content Security" in line]


def test_every_page_loads_without_a_csp_violation(browser, server, admin_user, scripted_llm):  # noqa: F811
    scripted_llm.script(
        TOPIC,
        call("spawn_subagent", name="dams", reason="a facet", task="Beaver dam sites"),
        call("wait_subagents"),
        reply("Beavers build where [water is slow](https://example.org/slow)."),
    )
    scripted_llm.script("Beaver dam sites", reply("Slow water."))
    context = browser.new_context()
    context.add_init_script(VIOLATIONS)
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    try:
        response = page.goto(f"{server.url}/login/")
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        assert visit(page, f"{server.url}/login/", console) == []
        log_in(page, server, "admin")
        root_id = start_research(page, TOPIC)
        expect(page.locator("#run-status")).to_have_text("done")
        page.locator("g.node").first.click()
        expect(page.locator("#panel")).to_contain_text("Beavers build")
        assert page.evaluate("window.__csp") == []
        dataset = services.dataset_create(owner=admin_user, name="Beavers")
        document = services.document_add(
            dataset=dataset, title="", data=b"Dams slow water.", filename="d.md"
        )
        pages = [
            "/",
            f"/runs/{root_id}/",
            f"/runs/{root_id}/agents/{root_id}/",
            "/v1/docs",
            "/v1/gb/research",
            "/kb/",
            f"/kb/{dataset.pk}/",
            f"/kb/{dataset.pk}/documents/{document.pk}/passages/0/",
            "/admin/",
            "/admin/research/run/",
            f"/admin/research/run/{root_id}/change/",
            "/admin/research/dataset/",
            "/admin/auth/user/",
        ]
        for path in pages:
            assert visit(page, f"{server.url}{path}", console) == [], path
        # The API explorer drew itself from this server's files.
        page.goto(f"{server.url}/v1/docs")
        expect(page.locator(".swagger-ui").first).to_be_visible()
        expect(page.get_by_text("Canopy API").first).to_be_visible()
    finally:
        context.close()
    foreign = [url for url in requests if not url.startswith((server.url, "data:"))]
    assert foreign == []


def luminance(rgb: str) -> float:
    red, green, blue = (int(part) for part in re.findall(r"\d+", rgb)[:3])
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def test_the_dark_theme_follows_the_system_setting(browser, server, alice):  # noqa: F811
    colours = {}
    for scheme in ("light", "dark"):
        context = browser.new_context(color_scheme=scheme)
        page = context.new_page()
        try:
            log_in(page, server, "alice")
            colours[scheme] = page.evaluate(
                "[getComputedStyle(document.documentElement).backgroundColor,"
                " getComputedStyle(document.documentElement).color]"
            )
        finally:
            context.close()
    (light_bg, light_text), (dark_bg, dark_text) = colours["light"], colours["dark"]
    assert luminance(light_bg) > 200 and luminance(light_text) < 80
    assert luminance(dark_bg) < 40 and luminance(dark_text) > 200
