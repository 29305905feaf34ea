"""The Resume button of an interrupted research (issue 26), at 1440x900 and 390x844, in
Debian's Chromium against a real daphne, its agent pool and the scripted model over HTTP.

The lead's model endpoint fails every try of its third call: the research ends failed with a
resumable ending, and its page offers Resume. Pressed, the research goes on from the lead's
last completed step: its finished sub-agent is not run again, the lead and its node carry the
resumed mark, its timeline says where it resumed, and the report arrives.
"""

import pytest
from playwright.sync_api import expect

from agents.llm.scripted import call, fail, reply
from research.models import Run
from tests.test_browser import browser, log_in, server  # noqa: F401  (fixtures)
from tests.test_run_page import no_sideways_scroll, shot, sized, start  # noqa: F401

# ruff: noqa: F811  (pytest fixtures imported from tests.test_browser)
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_interrupted_research_is_resumed_from_its_page(
    sized, server, scripted_llm, alice, tmp_path
):
    page = sized
    topic = f"Kingfishers ({page.size_name}): how do they dive?"
    scripted_llm.script(
        topic,
        call("spawn_subagent", name="scout", reason="the dives", task="SCOUT-TASK: dives"),
        call("wait_subagents"),
        fail(500, times=3),  # every try of the client: the research ends failed
        reply("Kingfishers dive head first; the report after resuming."),
    )
    scripted_llm.script("SCOUT-TASK", reply("scout's findings"))

    log_in(page, server, "alice")
    root_id = start(page, topic)
    resume = page.get_by_role("button", name="Resume research")
    expect(resume).to_be_visible(timeout=30_000)
    expect(page.locator("#run-status")).to_have_text("failed")
    shot(page, tmp_path, "resumable")
    no_sideways_scroll(page, "resumable")
    root = Run.objects.get(pk=root_id)
    assert root.error.startswith("llm: 500"), root.error

    resume.click()
    expect(page.locator("#run-status")).to_have_text("done", timeout=30_000)
    expect(resume).to_be_hidden()
    names = (
        page.locator(".node-name")
        if page.size_name == "desktop"
        else page.locator(".agent-row-name")
    )
    expect(names.filter(has_text="↻")).to_have_count(1)  # the lead went on; scout had ended
    page.locator("#panel details[data-key='timeline'] summary").click()
    expect(page.locator("#panel .timeline")).to_contain_text("resumed from its last completed step")
    shot(page, tmp_path, "resumed-full")
    no_sideways_scroll(page, "resumed")
    assert len(scripted_llm.requests_for("SCOUT-TASK")) == 1
    root.refresh_from_db()
    assert root.report.startswith("Kingfishers dive head first")
