"""A whole research over the real tools: search and read a local web, write a cited report."""

import pytest

from agents.llm.scripted import call, reply
from research import services
from research.models import Citation, Source
from tests.conftest import wait_finished

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def web(web, settings):
    """conftest's site, also the search provider."""
    settings.SEARCH_PROVIDER = "searxng"
    settings.SEARXNG_URL = web.url
    return web


def test_a_report_citing_a_page_it_read_and_one_it_never_saw(agent_pool, scripted_llm, web, alice):
    article = f"{web.url}/article"
    invented = "https://journal.example.org/otters-2019"
    scripted_llm.script(
        "otters",
        call("web_search", query="river otter valley"),
        call("read_page", url=article),
        reply(
            "# Otters\n\nThe otters came back in 2019 ([article](" + article + ")), as a "
            f"journal also says ({invented}).\n\n## Sources\n\n- {article}\n- {invented}"
        ),
    )
    run = wait_finished(services.run_start(owner=alice, topic="When did the otters return?"))

    assert run.status == "done", run.error
    search, page = [m["content"] for m in scripted_llm.tool_results("otters")]
    assert article in search
    assert "The river otter returned to the valley in the spring of 2019" in page
    stored = Source.objects.get(run=run, kind="page")
    assert stored.final_url == article and len(stored.sha256) == 64
    citations = {c.url: c for c in Citation.objects.filter(run=run)}
    assert citations[article].verified and citations[article].source.run_id == run.pk
    assert not citations[invented].verified and citations[invented].source is None


def test_a_failing_search_provider_gives_the_agent_a_readable_error(
    agent_pool, scripted_llm, web, alice, settings
):
    settings.SEARXNG_URL = f"{web.url}/broken-search"
    scripted_llm.script("broken search", call("web_search", query="x"), reply("No search."))
    run = wait_finished(services.run_start(owner=alice, topic="broken search research"))
    (result,) = [m["content"] for m in scripted_llm.tool_results("broken search")]
    assert result == "error: web_search: searxng answered 500"
    assert run.status == "done"


def test_a_long_page_reaches_the_model_cut_once_with_its_note(
    agent_pool, scripted_llm, web, alice, settings
):
    settings.READ_PAGE_MAX_BYTES = 256 * 1024
    scripted_llm.script("long page", call("read_page", url=f"{web.url}/huge"), reply("ok"))
    wait_finished(services.run_start(owner=alice, topic="long page research"))
    (page,) = [m["content"] for m in scripted_llm.tool_results("long page")]
    limit = settings.RESEARCH_TOOL_RESULT_MAX_CHARS
    assert f"this shows the first {limit:,} of " in page.splitlines()[-1]
    assert page.count("more characters cut") == 1
