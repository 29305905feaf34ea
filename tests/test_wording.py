"""The words the server draws before any script runs: how long ago, what a paused research
waits for, whose step budget it is, the knowledge base by that name, the Word export, the
way back from the API's docs. tests/test_browser_wording.py reads them in Chromium."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from frontend.templatetags.wording import ago
from research import endings, services
from research.models import Run, State, Status

pytestmark = pytest.mark.django_db


def test_a_moment_under_a_minute_ago_is_just_now():
    now = timezone.now()
    assert ago(now) == "just now"
    assert ago(now - timedelta(seconds=59)) == "just now"
    assert ago(now + timedelta(seconds=5)) == "just now"  # a clock a little ahead
    assert ago(now - timedelta(minutes=3, seconds=10)) == "3\xa0minutes ago"  # timesince's space
    assert ago(None) == ""


def _header(client, run: Run) -> str:
    html = client.get(f"/runs/{run.pk}/").content.decode()
    return re.search(r'<header class="run-header">.*?</header>', html, re.S).group(0)


@pytest.mark.parametrize(
    ("state", "words"),
    [(State.CLARIFYING, "needs your answers"), (State.REVIEWING, "needs your review")],
)
def test_a_paused_research_says_what_it_waits_for_before_the_script_runs(
    client, alice, run_factory, state, words
):
    run = run_factory(review_plan=True)
    Run.objects.filter(pk=run.pk).update(status=Status.PAUSED, state=state)
    client.force_login(alice)

    header = _header(client, run)

    assert f'<span class="badge status-paused" id="run-status">{words}</span>' in header
    assert ">paused<" not in header and "paused" not in re.sub(r"<[^>]+>", "", header)
    assert re.search(r'<dd id="elapsed">[^<]* · waiting for you</dd>', header), header
    assert f'<span class="badge status-paused" data-status>{words}</span>' in (
        client.get("/").content.decode()
    )


def test_an_ended_research_is_drawn_with_its_ending_as_the_script_draws_it(
    client, alice, run_factory
):
    run = run_factory()
    services.run_finish(run_id=run.pk, report="", error=endings.CANCELLED_BY_USER)
    client.force_login(alice)

    header = _header(client, run)

    assert '<span class="badge ending-cancelled" id="run-status">cancelled</span>' in header


def test_the_header_says_whose_budget_the_knowledge_base_and_just_now(client, alice, run_factory):
    dataset = services.dataset_create(owner=alice, name="Birds")
    run = run_factory(max_steps=7, dataset_id=dataset.pk)
    client.force_login(alice)

    header = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", _header(client, run)))

    assert "step budget 7 for the root agent · knowledge base Birds · started just now" in header
    assert "per agent" not in header and "dataset" not in header


def test_the_exports_offer_word_between_pdf_and_json(client, alice, run_factory):
    run = run_factory()
    services.run_finish(run_id=run.pk, report="# Otters\n\nThey came back.")
    client.force_login(alice)

    header = _header(client, run)

    assert re.findall(r"\?format=(\w+)\" download[^>]*>(\w+)</a>", header) == [
        ("md", "Markdown"),
        ("pdf", "PDF"),
        ("docx", "Word"),
        ("json", "JSON"),
    ]


def test_the_list_counts_agents_in_words_where_no_heading_shows(
    client, alice, run_factory, subagent_factory
):
    run_factory(topic="one agent")
    three = run_factory(topic="three agents")
    subagent_factory(three, "history")
    subagent_factory(three, "ecology")
    client.force_login(alice)

    html = client.get("/").content.decode()

    assert '<td>1<span class="phone-only"> agent</span></td>' in html
    assert '<td>3<span class="phone-only"> agents</span></td>' in html
    assert html.count("just now</time>") == 2 and not re.search(r"\b0\s+minutes", html)


def test_an_empty_note_names_its_field_in_the_api(api, run_factory):
    run = run_factory()

    refused = api.post(f"/v1/gb/research/{run.pk}/notes", {"text": " "}, format="json")

    assert refused.status_code == 400
    assert refused.json() == {"text": ["text must not be empty."]}


def test_the_api_docs_lead_back_to_the_research_list(client, alice):
    client.force_login(alice)

    html = client.get("/v1/docs").content.decode()

    assert '<nav class="swagger-ui" aria-label="Canopy">' in html
    assert '<a href="/">← All research</a>' in html


def test_a_follow_ups_badge_in_the_thread_says_what_it_waits_for(client, alice, run_factory):
    """The thread's navigation printed a follow-up's raw status ("paused")."""
    earlier = run_factory(topic="Otters")
    services.run_finish(run_id=earlier.pk, report="Otters are back.")
    later = run_factory(topic="Otters: why now?", follows_id=earlier.pk)
    Run.objects.filter(pk=later.pk).update(status=Status.PAUSED, state=State.REVIEWING)
    client.force_login(alice)

    thread = re.search(
        r'<nav class="thread".*?</nav>', client.get(f"/runs/{earlier.pk}/").content.decode(), re.S
    ).group(0)

    assert '<span class="badge status-paused">needs your review</span>' in thread
    assert ">paused<" not in thread


def test_a_transcript_line_reads_any_arguments_the_model_sent():
    """A model's arguments are a JSON text: too deep for the parser, it is shown as sent
    (it was a 500 of the agent panel); not an object, its value in words, not Python's."""
    from frontend.lines import arguments_in_words

    deep = "[" * 100_000
    assert arguments_in_words(deep) == deep[:89] + "…"
    assert arguments_in_words('["tides", "moon"]') == "[“tides”, “moon”]"
    assert arguments_in_words("true") == "true"
    assert arguments_in_words('{"query": "spring tides"}') == "spring tides"


def test_a_step_budget_of_one_reads_in_the_singular():
    """A budget of one read "1 of 1 steps + report" in the panel and the list."""
    from frontend.rendering import steps_text

    assert steps_text(0, 1) == "0 of 1 step"
    assert steps_text(2, 1) == "1 of 1 step + report"
    assert steps_text(1, 10) == "1 of 10 steps"


@pytest.mark.parametrize(
    ("provider", "words"),
    [("searxng", "None: search the web only"), ("", "None: no web search is set up")],
)
def test_the_start_form_offers_no_knowledge_base_in_words_true_to_the_server(
    client, alice, settings, provider, words
):
    """The start form offered "None: search the web only" on a server with no search
    provider, where a research without a knowledge base can search nothing."""
    settings.SEARCH_PROVIDER = provider
    client.force_login(alice)

    page = client.get("/").content.decode()

    assert re.search(f'<option value=""( selected)?>{words}</option>', page), words
