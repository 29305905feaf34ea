"""Follow-ups (issue 27): a research that continues a done one, in a thread, from every edge."""

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.llm.scripted import call, reply
from research import services
from research.models import Citation, Run, Source
from research.selectors.followups import thread_of
from research.services.datasets import dataset_create, document_add
from research.services.sources import source_record
from tests.conftest import wait_finished
from tests.test_demo import CHEMISTRY, MARKET
from tests.test_mcp_server import in_process

pytestmark = pytest.mark.django_db(transaction=True)

EARLIER = "When did the otters return to the valley?"
FOLLOWUP = "Follow-up: which fish do the otters that came back eat in winter?"
PASSAGE = "The river otter returned to the valley in the spring of 2019"


@pytest.fixture
def web(web, settings):
    """The conftest's site, which also answers the web search."""
    settings.SEARCH_PROVIDER = "searxng"
    settings.SEARXNG_URL = web.url
    return web


def earlier_research(scripted_llm, web, owner) -> Run:
    """A done research that planned, read a page and cited it (verified)."""
    article = f"{web.url}/article"
    scripted_llm.script(
        EARLIER,
        call("write_plan", items=["When the otters came back", "Who counted them"]),
        call("read_page", url=article),
        reply(f"# Otters\n\nThe otters came back in 2019 ([the article]({article})).\n"),
    )
    run = wait_finished(services.run_start(owner=owner, topic=EARLIER))
    assert run.status == "done", run.error
    assert Citation.objects.get(run=run).verified
    return run


def test_a_followup_lead_starts_from_the_earlier_report_and_cites_its_sources_as_verified(
    agent_pool, scripted_llm, web, alice, api_for
):
    earlier = earlier_research(scripted_llm, web, alice)
    article = f"{web.url}/article"
    scripted_llm.script(
        FOLLOWUP,
        reply(f"# Otter diet\n\nThey eat trout, says the earlier source ({article})."),
    )

    response = api_for(alice).post(
        "/v1/gb/research", {"topic": FOLLOWUP, "follows": earlier.pk}, format="json"
    )

    assert response.status_code == 201, response.json()
    assert response.json()["follows_id"] == earlier.pk
    followup = wait_finished(Run.objects.get(pk=response.json()["id"]))
    assert followup.status == "done", followup.error
    task = scripted_llm.requests_for(FOLLOWUP)[0]["messages"][1]["content"]
    assert task.startswith(FOLLOWUP)
    for given in (
        f"(run {earlier.pk})",
        "1. When the otters came back",  # its plan
        "The otters came back in 2019",  # its report
        f"({article})",  # its verified source, with the passage the earlier research read
        PASSAGE,
    ):
        assert given in task, given
    citation = Citation.objects.get(run=followup)
    assert (citation.url, citation.verified, citation.source.carried) == (article, True, True)
    # Carried, not fetched again: the follow-up read no page of its own.
    assert list(Source.objects.filter(root=followup).values_list("kind", "carried")) == [
        ("page", True)
    ]
    report = api_for(alice).get(f"/v1/gb/research/{followup.pk}/report").json()
    assert [(c["url"], c["status"]) for c in report["citations"]] == [(article, "verified")]
    assert thread_of(earlier).later == [followup]
    assert thread_of(followup).earlier == [earlier]


@pytest.mark.parametrize(
    ("follows", "words"),
    [
        ("twelve", "A valid integer is required."),
        (0, "Ensure this value is greater than or equal to 1."),
        (987654, "no research with id 987654."),
        ("bob's", "no research with id {bob}."),
        ("child", "run {child} is a sub-agent: follow up its research (run {root}) instead."),
        ("working", "research {working} is queued: only a done research with a report"),
        ("failed", "research {failed} has ended (failed: the model failed): only a done"),
        ("cancelled", "research {cancelled} has ended (cancelled by the user): only a done"),
        ("paused", "research {paused} needs your review: only a done research with a report"),
    ],
)
def test_a_bad_follows_is_a_400_naming_the_field(api_for, alice, bob, follows, words):
    done = services.run_start(owner=alice, topic="Done")
    services.run_finish(run_id=done.pk, report="# Done")
    failed = services.run_start(owner=alice, topic="Failed")
    services.run_finish(run_id=failed.pk, error="the model failed")
    working = services.run_start(owner=alice, topic="Working")
    launch = services.Launch(name="alpha", reason="why", task="part", max_steps=3)
    child = services.subagent_create(parent_id=working.pk, launch=launch)
    cancelled = services.run_start(owner=alice, topic="Cancelled")
    services.run_finish(run_id=cancelled.pk, error=services.CANCELLED_BY_USER)
    paused = services.run_start(owner=alice, topic="Paused")
    services.run_claim(run_id=paused.pk)
    services.plan_write(root_id=paused.pk, items=["One"])
    assert services.plan_pause(root_id=paused.pk)
    bobs = services.run_start(owner=bob, topic="Bob's")
    services.run_finish(run_id=bobs.pk, report="# Bob's")
    ids = {
        "bob's": bobs.pk,
        "child": child.pk,
        "working": working.pk,
        "failed": failed.pk,
        "cancelled": cancelled.pk,
        "paused": paused.pk,
    }
    before = Run.objects.count()

    response = api_for(alice).post(
        "/v1/gb/research",
        {"topic": "More", "follows": ids.get(follows, follows)},
        format="json",
    )

    assert response.status_code == 400
    expected = words.format(
        bob=bobs.pk,
        root=working.pk,
        **{key: value for key, value in ids.items() if key != "bob's"},
    )
    assert response.json()["follows"][0].startswith(expected), response.json()
    assert Run.objects.count() == before


def test_follows_is_in_the_schema_of_the_start_request_and_the_run(api):
    schema = api.get("/v1/schema", HTTP_ACCEPT="application/json").json()
    start = schema["components"]["schemas"]["RunStart"]["properties"]
    assert "follow up this done research" in start["follows"]["description"]
    assert "follows_id" in schema["components"]["schemas"]["RunOutput"]["properties"]


def test_the_cli_and_mcp_start_a_followup(alice, settings, capsys):
    earlier = services.run_start(owner=alice, topic="Tides")
    services.run_finish(run_id=earlier.pk, report="# Tides\n\nThey follow the moon.")

    call_command("research", "start", "Why two a day?", "--follows", str(earlier.pk), "--no-wait")

    cli = Run.objects.get(topic="Why two a day?")
    assert cli.follows_id == earlier.pk
    assert str(cli.pk) in capsys.readouterr().out
    with pytest.raises(CommandError, match=f"research {cli.pk} is queued"):
        call_command("research", "start", "And?", "--follows", str(cli.pk), "--no-wait")

    async def work(client) -> tuple:
        started = await client.call_tool(
            "start_research", {"topic": "And the moon?", "follows": earlier.pk}
        )
        refused = await client.call_tool("start_research", {"topic": "x", "follows": 999999})
        return started.structured_content, refused.content[0].text

    started, refused = in_process(alice, work)
    assert Run.objects.get(pk=started["id"]).follows_id == earlier.pk
    assert refused == "no research with id 999999."


def test_the_demo_model_answers_a_followup_from_the_earlier_sources_offline(agent_pool, alice):
    chemistry = dataset_create(owner=alice, name="EV chemistry")
    document_add(dataset=chemistry, title="Chemistries", data=CHEMISTRY, filename="chem.md")
    market = dataset_create(owner=alice, name="EV market")
    document_add(dataset=market, title="Market", data=MARKET, filename="market.md")
    earlier = services.run_start(
        owner=alice, topic="Why LFP cells last longer", model="demo", dataset_id=chemistry.pk
    )
    earlier = wait_finished(earlier, timeout=30)
    assert earlier.status == "done", earlier.error
    carried = set(Citation.objects.filter(run=earlier, verified=True).values_list("url", flat=True))
    assert carried

    # On the market notes only: what it knows of chemistry comes from the earlier research.
    followup = services.run_start(
        owner=alice,
        topic="Who makes the most LFP batteries?",
        model="demo",
        dataset_id=market.pk,
        follows_id=earlier.pk,
    )
    followup = wait_finished(followup, timeout=30)

    assert followup.status == "done", followup.error
    report = followup.report
    assert report.startswith("# Who makes the most LFP batteries?")
    assert "CATL is the largest maker" in report  # its own finding, from the knowledge base
    earlier_part = report.split("## From the earlier research")[1].split("## Sources")[0]
    assert f"This follows up research {earlier.pk}, “Why LFP cells last longer”" in earlier_part
    assert "Lithium iron phosphate (LFP) cells now power most new electric cars" in earlier_part
    quoted = {url for url in carried if f"]({url})" in earlier_part}
    assert quoted, earlier_part
    verified = dict(Citation.objects.filter(run=followup).values_list("url", "verified"))
    assert all(verified[url] for url in quoted), verified


def test_the_page_refuses_a_followup_of_a_working_or_someone_elses_research(client, alice, bob):
    working = services.run_start(owner=alice, topic="Still at it")
    client.force_login(alice)

    response = client.post(f"/runs/{working.pk}/follow-up", {"question": "And then?"}, follow=True)

    assert f"Research {working.pk} is queued: only a done research" in response.text
    assert not Run.objects.filter(follows=working).exists()
    client.force_login(bob)
    assert client.post(f"/runs/{working.pk}/follow-up", {"question": "Mine?"}).status_code == 404


def test_the_runs_list_shows_threads_in_the_same_queries_however_many(client, alice, settings):
    settings.RESEARCH_MAX_WORKING_ROOTS = 50
    earlier = services.run_start(owner=alice, topic="The first question")
    services.run_finish(run_id=earlier.pk, report="# First")
    services.run_start(owner=alice, topic="A second question", follows_id=earlier.pk)
    client.force_login(alice)
    with CaptureQueriesContext(connection) as before:
        page = client.get("/").text
    assert "Follows up" in page and "1 follow-up" in page
    for number in range(5):
        services.run_start(owner=alice, topic=f"Question {number}", follows_id=earlier.pk)

    with CaptureQueriesContext(connection) as after:
        page = client.get("/").text

    assert "6 follow-ups" in page and page.count("Follows up") == 6
    assert len(after) == len(before), [query["sql"] for query in after]


def test_a_followups_markdown_export_says_what_it_follows_and_where_a_source_came_from(
    alice, api_for
):
    earlier = services.run_start(owner=alice, topic="Tides")
    source_record(run_id=earlier.pk, kind="page", url="https://tides.example/moon", title="Moon")
    report = "# Tides\n\nThey follow the moon (https://tides.example/moon)."
    services.citations_record(run_id=earlier.pk, report=report)
    services.run_finish(run_id=earlier.pk, report=report)
    followup = services.run_start(owner=alice, topic="Why two a day?", follows_id=earlier.pk)
    again = "# Two a day\n\nThe moon pulls both sides (https://tides.example/moon)."
    services.citations_record(run_id=followup.pk, report=again)
    services.run_finish(run_id=followup.pk, report=again)

    markdown = api_for(alice).get(f"/v1/gb/research/{followup.pk}/export?format=md")

    text = markdown.content.decode()
    assert "1. [Moon](https://tides.example/moon): verified, seen by the research this one" in text
    assert f"*Canopy research {followup.pk}, a follow-up of research {earlier.pk}," in text
