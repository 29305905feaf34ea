"""The pages: log in, the researches list with its start form, the run page and agent panel."""

import json
import re

import pytest

from research import services
from research.models import Dataset, Run
from research.services.citations import citations_record
from research.services.sources import source_record
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

XSS = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2"> otters'


def _start(client, **fields) -> object:
    data = {"topic": "How do otters hunt?", "model": "scripted", "max_steps": "7", "dataset": ""}
    return client.post("/", {**data, **fields})


def _config(response) -> dict:
    match = re.search(
        r'<script id="canopy-config" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    assert match, "the run page embeds its configuration"
    return json.loads(match.group(1))


def _panel(client, root: Run, run: Run | None = None) -> str:
    response = client.get(f"/runs/{root.pk}/agents/{(run or root).pk}/")
    assert response.status_code == 200
    return response.content.decode()


# --- Logging in --------------------------------------------------------------------------------


def test_every_page_asks_an_anonymous_visitor_to_log_in(client, run_factory):
    run = run_factory()

    for url in ("/", f"/runs/{run.pk}/", f"/runs/{run.pk}/agents/{run.pk}/"):
        response = client.get(url)
        assert response.status_code == 302
        assert response.url.startswith("/login/?next=")


def test_logging_in_opens_the_researches_and_logging_out_closes_them(client, alice):
    response = client.post("/login/", {"username": "alice", "password": PASSWORD}, follow=True)

    assert response.redirect_chain[-1][0] == "/"
    assert "Signed in as <strong>alice</strong>" in response.content.decode()

    assert client.post("/logout/").status_code == 302
    assert client.get("/").status_code == 302


def test_a_wrong_password_is_refused_with_a_message(client, alice):
    response = client.post("/login/", {"username": "alice", "password": "nope"})

    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()


# --- The researches list ------------------------------------------------------------------------


def test_the_list_shows_only_the_users_own_researches(
    client, alice, bob, tree_factory, run_factory, django_assert_max_num_queries
):
    for index in range(3):
        tree_factory(topic=f"Alice asks about otters {index}")
    run_factory(owner=bob, topic="Bob asks about beavers")
    client.force_login(alice)

    with django_assert_max_num_queries(8):
        response = client.get("/")

    html = response.content.decode()
    assert "Alice asks about otters 0" in html
    assert "Bob asks about beavers" not in html
    assert len(re.findall(r'<tr data-run-id="', html)) == 3  # roots only, not sub-agents
    # Each tree: a root, two children, one grandchild each.
    assert [row.run.agent_count for row in response.context["page"].rows] == [5, 5, 5]


def test_the_form_offers_the_known_models_and_only_the_users_datasets(client, alice, bob):
    Dataset.objects.create(owner=alice, name="Alice's notes")
    Dataset.objects.create(owner=bob, name="Bob's notes")
    client.force_login(alice)

    html = client.get("/").content.decode()

    assert '<option value="scripted" selected>scripted</option>' in html
    assert "demo (offline demo model)" in html
    assert "Alice&#x27;s notes" in html
    assert "Bob&#x27;s notes" not in html


def test_the_form_starts_a_research_and_opens_its_page(client, alice):
    dataset = Dataset.objects.create(owner=alice, name="notes")
    client.force_login(alice)

    response = _start(client, topic="  How do otters hunt?  ", dataset=str(dataset.pk))

    run = Run.objects.get(owner=alice)
    assert response.status_code == 302
    assert response.url == f"/runs/{run.pk}/"
    assert (run.topic, run.model, run.max_steps, run.dataset, run.parent_id) == (
        "How do otters hunt?",
        "scripted",
        7,
        dataset,
        None,
    )


def test_a_fourth_working_research_is_refused_with_a_clear_message(client, alice, run_factory):
    for index in range(3):
        run_factory(topic=f"question {index}")
    client.force_login(alice)

    response = _start(client)

    assert response.status_code == 200
    html = response.content.decode()
    assert 'role="alert"' in html
    assert "You already have 3 researches working; the limit is 3" in html
    assert Run.objects.filter(owner=alice).count() == 3


def test_bad_input_is_refused_next_to_its_field(client, alice, bob):
    bobs = Dataset.objects.create(owner=bob, name="Bob's notes")
    client.force_login(alice)

    empty = _start(client, topic="   ").content.decode()
    too_many_steps = _start(client, max_steps="99").content.decode()
    others_dataset = _start(client, dataset=str(bobs.pk)).content.decode()
    unknown_model = _start(client, model="gpt-nonexistent").content.decode()

    assert 'id="id_topic-error">The question must not be empty.' in empty
    assert 'id="id_max_steps-error" role="alert">The step budget must be from 1 to 40, not 99.' in (
        too_many_steps
    )
    assert "Select a valid choice" in others_dataset
    assert "Select a valid choice" in unknown_model
    assert not Run.objects.exists()


# --- The run page -------------------------------------------------------------------------------


def test_another_users_run_is_not_found_on_any_page(client, bob, tree_factory):
    root = tree_factory()
    child = root.children.first()
    client.force_login(bob)

    assert client.get(f"/runs/{root.pk}/").status_code == 404
    assert client.get(f"/runs/{child.pk}/").status_code == 404
    assert client.get(f"/runs/{root.pk}/agents/{child.pk}/").status_code == 404


def test_an_agent_is_shown_only_under_its_own_tree(client, alice, tree_factory):
    first, second = tree_factory(), tree_factory(topic="another question")
    client.force_login(alice)

    response = client.get(f"/runs/{first.pk}/agents/{second.children.first().pk}/")

    assert response.status_code == 404


def test_the_run_page_starts_from_the_whole_tree(client, alice, tree_factory):
    root = tree_factory()
    history, semantics = root.children.order_by("id")
    services.message_record(from_run_id=history.pk, to_run_id=semantics.pk, text="hello")
    root.refresh_from_db()
    client.force_login(alice)

    config = _config(client.get(f"/runs/{root.pk}/"))

    snapshot = config["snapshot"]
    assert config["root"] == config["selected"] == root.pk
    assert snapshot["seq"] == root.event_seq
    assert {run["id"] for run in snapshot["runs"]} == set(
        Run.objects.filter(root=root).values_list("pk", flat=True)
    )
    assert [message["text"] for message in snapshot["messages"]] == ["hello"]
    assert config["socket"] == f"/ws/runs/{root.pk}/"


def test_a_sub_agents_address_opens_its_tree_with_it_selected(client, alice, tree_factory):
    root = tree_factory()
    child = root.children.first()
    client.force_login(alice)

    response = client.get(f"/runs/{child.pk}/", follow=True)

    assert response.redirect_chain == [(f"/runs/{root.pk}/?agent={child.pk}", 302)]
    assert _config(response)["selected"] == child.pk


def test_the_demo_model_is_announced_by_a_banner(client, alice, run_factory):
    demo = run_factory(model="demo")
    scripted = run_factory(topic="a question for a real model")
    client.force_login(alice)

    assert "Offline demo model." in client.get(f"/runs/{demo.pk}/").content.decode()
    assert "Offline demo model." not in client.get(f"/runs/{scripted.pk}/").content.decode()


def _row_text(html: str, run: Run) -> str:
    """The visible text of a run's row in the researches list, spaces collapsed."""
    row = re.search(rf'<tr data-run-id="{run.pk}">(.*?)</tr>', html, re.S)
    assert row, f"run {run.pk} is listed"
    return " ".join(re.sub(r"<[^>]+>", " ", row.group(1)).split())


def test_the_list_says_a_demo_run_runs_on_the_offline_demo_model(client, alice, run_factory):
    demo = run_factory(model="demo")
    scripted = run_factory(topic="a question for a real model")
    client.force_login(alice)

    html = client.get("/").content.decode()

    assert "demo (offline demo model)" in _row_text(html, demo)
    assert "offline demo model" not in _row_text(html, scripted)


# --- The agent panel ---------------------------------------------------------------------------


def test_the_panel_shows_reason_task_timeline_transcript_and_messages(client, alice, tree_factory):
    root = tree_factory(children=("history", "ecology"), grandchildren=())
    history, ecology = root.children.order_by("id")
    services.run_claim(run_id=history.pk)
    services.run_set_state(run_id=history.pk, state="searching", detail="otter census 2019")
    services.step_record(
        run_id=history.pk,
        kind="tool",
        tool="web_search",
        input={"query": "otter census"},
        output="1. Otter census",
    )
    services.message_record(from_run_id=history.pk, to_run_id=ecology.pk, text="see the census")
    client.force_login(alice)

    html = _panel(client, root, history)

    assert "history covers one facet" in html  # the reason
    assert "the history facet of" in html  # the task
    assert "otter census 2019" in html  # the timeline
    assert '<span class="step-kind">web_search</span> otter census' in html
    assert "see the census" in html
    assert 'data-cancel-run="' + str(history.pk) + '"' in html


def test_a_finished_sub_agent_and_the_root_offer_no_cancel_button(client, alice, tree_factory):
    root = tree_factory(children=("history",), grandchildren=())
    history = root.children.get()
    services.run_finish(run_id=history.pk, report="done")
    client.force_login(alice)

    assert "data-cancel-run" not in _panel(client, root, history)
    assert "data-cancel-run" not in _panel(client, root)


def test_markup_in_a_report_and_a_message_renders_as_text(client, alice, tree_factory):
    root = tree_factory(children=("a", "b"), grandchildren=())
    a, b = root.children.order_by("id")
    services.message_record(from_run_id=a.pk, to_run_id=b.pk, text=XSS)
    services.run_finish(run_id=b.pk, report=f"# Findings\n\n{XSS}\n")
    client.force_login(alice)

    for html in (_panel(client, root, a), _panel(client, root, b)):
        assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in html
        assert "&lt;img src=x onerror=" in html
        assert "<script" not in html
        assert "<img" not in html


def test_an_address_no_parser_reads_is_text_not_a_broken_page(client, alice, tree_factory):
    """A model may write "https://[citation needed]" in a report or a message: urlsplit calls
    it an invalid IPv6 address, and the run page and the agent's panel answered 500."""
    root = tree_factory(children=("a", "b"), grandchildren=())
    a, b = root.children.order_by("id")
    odd = "Tides are old (https://[citation needed]), [so says](https://[y) and <https://[z>."
    services.message_record(from_run_id=a.pk, to_run_id=b.pk, text=odd)
    citations_record(run_id=b.pk, report=odd)
    services.run_finish(run_id=b.pk, report=odd)
    client.force_login(alice)

    assert client.get(f"/runs/{root.pk}/").status_code == 200
    for html in (_panel(client, root, a), _panel(client, root, b)):
        assert "https://[citation needed]" in html
        assert 'href="https://[citation' not in html


def test_cited_urls_are_marked_verified_or_flagged(client, alice, run_factory):
    root = run_factory()
    source_record(run_id=root.pk, kind="page", url="https://example.org/otters", title="Otters")
    report = "Otters came back ([census](https://example.org/otters)); see https://made.up/page."
    citations_record(run_id=root.pk, report=report)
    services.run_finish(run_id=root.pk, report=report)
    client.force_login(alice)

    html = _panel(client, root)

    assert re.search(r'<a href="https://example.org/otters" class="citation verified"', html)
    assert re.search(r'<a href="https://made.up/page" class="citation flagged"', html)
    assert '<span class="badge badge-verified">verified</span>' in html
    assert "seen by the root agent" in html
    assert '<span class="badge badge-flagged">flagged</span>' in html
    assert "no agent of this research saw this URL" in html


def test_with_the_demo_model_the_form_offers_the_starter_dataset_first(client, alice, settings):
    from research.services.datasets import dataset_create

    settings.RESEARCH_MODEL = "demo"
    dataset_create(owner=alice, name="notes")
    starter = dataset_create(owner=alice, name="Python reference")
    client.force_login(alice)
    page = client.get("/")
    assert f'<option value="{starter.pk}" selected>' in page.content.decode()
