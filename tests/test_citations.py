"""Citations: what a report cites, checked against what the agents of its tree saw."""

import pytest

from agents.llm.scripted import reply
from agents.loop.lifetime import run_agent
from agents.runtime.context import AgentContext, CancelToken
from agents.tools.knowledge import QUERY
from research import services
from research.models import Citation, Event, RunState
from research.selectors import citations_for
from research.services.citations import citations_record, cited_urls, url_key
from research.services.datasets import dataset_create, document_add
from research.services.sources import source_record


def tree(owner, dataset_id=None):
    root = services.run_start(owner=owner, topic="Tides", dataset_id=dataset_id)
    launch = services.Launch(name="alpha", reason="split", task="tides", max_steps=5)
    alpha = services.subagent_create(parent_id=root.pk, launch=launch)
    return root, alpha


def test_a_links_url_keeps_its_own_last_character_a_bare_urls_loses_the_sentences():
    report = (
        "See [the note](https://a.org/notes_) and [v2](https://b.org/v2.). Also https://c.org/x_."
    )
    assert [entry.url for entry in cited_urls(report)] == [
        "https://a.org/notes_",
        "https://b.org/v2.",
        "https://c.org/x",
    ]


def test_cited_urls_come_from_links_and_bare_text_without_sentence_punctuation():
    report = (
        "Tides follow the moon ([NOAA](https://tidesandcurrents.noaa.gov/faq.html#tides)). "
        "See https://en.wikipedia.org/wiki/Tide_(disambiguation), and "
        "<https://example.org/paper/>. Again: https://tidesandcurrents.noaa.gov/faq.html. "
        "The dataset says so (kb://dataset/3/document/7#2). **https://example.org/bold**"
    )
    urls = cited_urls(report)
    assert [(cited.url, cited.title) for cited in urls] == [
        ("https://tidesandcurrents.noaa.gov/faq.html#tides", "NOAA"),
        ("https://en.wikipedia.org/wiki/Tide_(disambiguation)", ""),
        ("https://example.org/paper/", ""),
        ("kb://dataset/3/document/7#2", ""),
        ("https://example.org/bold", ""),
    ]


def test_url_key_ignores_fragments_trailing_slashes_and_case_but_not_chunk_positions():
    assert url_key("HTTPS://Example.ORG/a/b/#intro") == url_key("https://example.org/a/b")
    assert url_key("https://example.org/a?page=2") != url_key("https://example.org/a?page=3")
    assert url_key("kb://dataset/1/document/2#3") != url_key("kb://dataset/1/document/2#4")


@pytest.mark.django_db
def test_a_read_page_is_verified_and_an_unseen_url_is_flagged(alice):
    root, alpha = tree(alice)
    source_record(
        run_id=alpha.pk,
        kind="page",
        url="https://example.org/tides",
        final_url="https://www.example.org/tides/",
        title="Tides explained",
    )
    report = (
        "Spring tides come at new and full moon ([source](https://www.example.org/tides)).\n"
        "Neap tides are 20% lower (https://invented.example/neap-study)."
    )

    citations = citations_record(run_id=root.pk, report=report)

    assert [(c.url, c.verified) for c in citations] == [
        ("https://www.example.org/tides", True),
        ("https://invented.example/neap-study", False),
    ]
    verified, flagged = citations_for(run_id=root.pk)
    assert (verified.found_by, verified.source.kind, verified.title) == ("alpha", "page", "source")
    assert (flagged.found_by, flagged.source) == (None, None)


@pytest.mark.django_db
def test_a_page_that_was_read_beats_a_search_result_for_the_same_url(alice):
    root, alpha = tree(alice)
    source_record(run_id=root.pk, kind="search", url="https://example.org/moon", title="Moon")
    source_record(run_id=alpha.pk, kind="page", url="https://example.org/moon/")
    (citation,) = citations_record(run_id=root.pk, report="See https://example.org/moon.")
    assert citation.verified
    assert (citation.source.kind, citation.source.run_id) == ("page", alpha.pk)


@pytest.mark.django_db
def test_an_agent_that_read_the_page_itself_is_the_one_its_report_says_saw_it(alice):
    """Two siblings read one page; the second's report said it was "seen by" the first."""
    root, alpha = tree(alice)
    beta = services.subagent_create(
        parent_id=root.pk,
        launch=services.Launch(name="beta", reason="split", task="moon", max_steps=5),
    )
    source_record(run_id=alpha.pk, kind="page", url="https://example.org/moon")
    source_record(run_id=beta.pk, kind="search", url="https://example.org/moon")
    source_record(run_id=beta.pk, kind="page", url="https://example.org/moon/")
    report = "See https://example.org/moon."
    citations_record(run_id=beta.pk, report=report)
    citations_record(run_id=root.pk, report=report)
    assert citations_for(run_id=beta.pk).get().found_by == "beta"
    assert citations_for(run_id=root.pk).get().found_by == "alpha"  # the first to read it
    # Its own search result does not beat a page another agent read.
    source_record(run_id=root.pk, kind="search", url="https://example.org/moon")
    citations_record(run_id=root.pk, report=report)
    assert citations_for(run_id=root.pk).get().found_by == "alpha"


@pytest.mark.django_db
def test_a_cited_knowledge_base_passage_is_verified_only_if_an_agent_got_it(alice):
    dataset = dataset_create(owner=alice, name="Tides")
    document = document_add(
        dataset=dataset, title="Moon", data=b"The moon pulls the oceans.", filename="m.txt"
    )
    root, alpha = tree(alice, dataset.pk)
    QUERY.handler(AgentContext.load(alpha.pk, CancelToken(alpha.pk)), {"question": "moon pulls"})
    seen = f"kb://dataset/{dataset.pk}/document/{document.pk}#0"
    unseen = f"kb://dataset/{dataset.pk}/document/{document.pk}#9"

    citations = citations_record(run_id=root.pk, report=f"The moon pulls ({seen}). Also {unseen}.")

    assert [(c.url, c.verified, c.title) for c in citations] == [
        (seen, True, "Moon"),
        (unseen, False, ""),
    ]


@pytest.mark.django_db
def test_recording_again_replaces_the_runs_earlier_citations(alice):
    root, _ = tree(alice)
    citations_record(run_id=root.pk, report="https://a.example/1 and https://a.example/2")
    citations_record(run_id=root.pk, report="Only https://a.example/3 now.")
    assert list(Citation.objects.filter(run=root).values_list("url", flat=True)) == [
        "https://a.example/3"
    ]


@pytest.mark.django_db
def test_an_agents_finish_stores_its_report_and_its_checked_citations_together(alice):
    root, alpha = tree(alice)
    services.run_claim(run_id=alpha.pk)
    source_record(run_id=alpha.pk, kind="page", url="https://example.org/tides")
    report = "See https://example.org/tides and https://made.up/moon."
    checked = services.citations_checked(run_id=alpha.pk, root_id=root.pk, report=report)
    assert Citation.objects.filter(run=alpha).count() == 0  # checked, not stored yet

    assert services.run_finish(run_id=alpha.pk, report=report, citations=checked, replacing=False)

    alpha.refresh_from_db()
    assert (alpha.status, alpha.report) == ("done", report)
    assert [(c.url, c.verified) for c in Citation.objects.filter(run=alpha)] == [
        ("https://example.org/tides", True),
        ("https://made.up/moon", False),
    ]
    # No state of its own any more between the agent's last step and its end.
    assert not RunState.objects.filter(run=alpha, detail="checking citations").exists()
    events = Event.objects.filter(root_id=root.pk).order_by("seq")
    ours = [event.type for event in events if event.payload["run"] == alpha.pk]
    assert ours[-2:] == ["run.report", "run.finished"]


@pytest.mark.django_db
def test_a_resumed_agents_finish_replaces_the_citations_of_its_earlier_report(alice):
    root, alpha = tree(alice)
    services.run_claim(run_id=alpha.pk)
    citations_record(run_id=alpha.pk, report="Earlier: https://a.example/old")
    report = "Now: https://a.example/new"
    checked = services.citations_checked(run_id=alpha.pk, root_id=root.pk, report=report)

    services.run_finish(run_id=alpha.pk, report=report, citations=checked, replacing=True)

    assert [c.url for c in Citation.objects.filter(run=alpha)] == ["https://a.example/new"]


@pytest.mark.django_db
def test_the_finish_of_a_run_that_ended_meanwhile_stores_no_citations_and_keeps_its_numbers(
    alice,
):
    root, alpha = tree(alice)
    services.run_claim(run_id=alpha.pk)
    services.run_finish(run_id=alpha.pk, error="cancelled by the analyst")
    root.refresh_from_db()
    states, seq = RunState.objects.filter(run=alpha).count(), root.event_seq
    report = "See https://example.org/tides."
    checked = services.citations_checked(run_id=alpha.pk, root_id=root.pk, report=report)

    assert not services.run_finish(run_id=alpha.pk, report=report, citations=checked)

    alpha.refresh_from_db()
    root.refresh_from_db()
    assert (alpha.status, alpha.error, alpha.report) == ("failed", "cancelled by the analyst", "")
    assert RunState.objects.filter(run=alpha).count() == states
    assert not Citation.objects.filter(run=alpha).exists()
    # The event numbers it reserved went back with its rollback: the tree has no gap.
    assert root.event_seq == seq == Event.objects.filter(root_id=root.pk).count()


@pytest.mark.django_db(transaction=True)
def test_an_agent_ends_with_its_report_and_citations_in_one_step_after_its_last_state(
    scripted_llm, alice, settings
):
    """Through the agent loop: its last model call, then its report and its checked
    citations in the finish's transaction; no "checking citations" state between them."""
    settings.RESEARCH_VERIFY_REPORTS = False
    root, alpha = tree(alice)
    source_record(run_id=root.pk, kind="page", url="https://example.org/tides")
    scripted_llm.script("tides", reply("The moon (https://example.org/tides), https://made.up/x."))

    services.run_claim(run_id=alpha.pk)
    run_agent(run_id=alpha.pk, token=CancelToken(alpha.pk), pool=None)

    alpha.refresh_from_db()
    assert alpha.status == "done" and alpha.report.startswith("The moon")
    assert [(c.url, c.verified) for c in citations_for(run_id=alpha.pk)] == [
        ("https://example.org/tides", True),
        ("https://made.up/x", False),
    ]
    assert list(RunState.objects.filter(run=alpha).values_list("state", flat=True)) == [
        "queued",
        "thinking",
        "ended",
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("writer", ["no writer", "the writer's batch"])
def test_citations_that_cannot_be_stored_cost_the_agent_its_citations_not_its_report(
    scripted_llm, alice, settings, monkeypatch, caplog, writer
):
    """A citation row the database refuses (here: a source that is gone) fails the finish's
    transaction (its own, or the writer's batch, written again record by record); the agent
    finishes again without citations, and its report is kept."""
    settings.RESEARCH_VERIFY_REPORTS = False
    root, alpha = tree(alice)
    scripted_llm.script("tides", reply("The moon (https://example.org/tides)."))
    checked = services.citations_checked

    def pointing_at_a_source_that_is_gone(**kwargs):
        citations = checked(**kwargs)
        for citation in citations:
            citation.source_id = 10**9  # no such source: the row breaks its foreign key
        return citations

    monkeypatch.setattr(services, "citations_checked", pointing_at_a_source_that_is_gone)

    services.run_claim(run_id=alpha.pk)
    user = object()
    if writer != "no writer":
        services.step_writer.start(user)
    retried = services.step_writer.retried
    try:
        run_agent(run_id=alpha.pk, token=CancelToken(alpha.pk), pool=None)
    finally:
        services.step_writer.stop(user)

    alpha.refresh_from_db()
    assert (alpha.status, alpha.report) == ("done", "The moon (https://example.org/tides).")
    assert not Citation.objects.filter(run=alpha).exists()
    assert f"the citations of run {alpha.pk} could not be stored" in caplog.text
    assert Event.objects.filter(payload__run=alpha.pk, type="run.finished").count() == 1
    # The batch holding the end failed at its commit and was written again record by record.
    assert services.step_writer.retried - retried == (writer != "no writer")
