"""The Django admin: every run and record browsable by staff, in a fixed number of queries."""

import hashlib
import html
import re

import pytest
from django.contrib import admin
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.http import QueryDict
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from research import services
from research.fulltext import search_chunks
from research.models import (
    Chunk,
    Citation,
    Dataset,
    Document,
    Event,
    Profile,
    RemoteServer,
    Run,
    RunState,
    Source,
    Status,
    Step,
    Worker,
)
from research.services import datasets

RUNS = "/admin/research/run/"

pytestmark = pytest.mark.django_db


def _queries(client: Client, url: str) -> int:
    client.get(url)  # warms per-process caches (content types) that a first request fills
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    return len(queries)


def _busy_tree(tree_factory, **kwargs) -> Run:
    """A tree whose agents have done a bit of everything the run page shows."""
    root = tree_factory(**kwargs)
    first, second, *_ = root.children.order_by("id")
    services.run_claim(run_id=root.pk)
    services.run_set_state(run_id=first.pk, state="searching", detail="tide tables")
    services.message_record(from_run_id=first.pk, to_run_id=second.pk, text="check the moon")
    services.usage_add(run_id=first.pk, input_tokens=100, output_tokens=50, latency_ms=12)
    services.step_record(run_id=first.pk, kind="tool", tool="web_search", input={"q": "tides"})
    return root


def test_run_list_shows_roots_and_sub_agents(admin_client, tree_factory):
    _busy_tree(tree_factory, children=("history", "semantics"))

    response = admin_client.get(RUNS)

    assert response.status_code == 200
    page = response.content.decode()
    assert "history" in page and "semantics" in page
    assert "context managers and exceptions" in page
    assert "Cancel selected runs" in page


def test_run_list_runs_a_fixed_number_of_queries(
    admin_client, settings, bob, tree_factory, run_factory
):
    settings.RESEARCH_MAX_WORKING_ROOTS = 100
    _busy_tree(tree_factory, children=("a", "b"), grandchildren=())
    few = _queries(admin_client, RUNS)
    for _ in range(3):
        _busy_tree(tree_factory, owner=bob, children=("c", "d"), grandchildren=())

    many = _queries(admin_client, RUNS)

    assert Run.objects.count() == 12
    assert many == few
    for params in ("?status__exact=queued", "?q=facet", "?depth=1&model=scripted"):
        assert _queries(admin_client, RUNS + params) == few


def test_run_page_shows_the_tree_and_records_in_a_fixed_number_of_queries(
    admin_client, tree_factory
):
    small = _busy_tree(tree_factory, children=("a", "b"), grandchildren=())
    big = _busy_tree(tree_factory, children=("a", "b", "c", "d", "e"), grandchildren=("x",))
    first = big.children.order_by("id").first()
    for index in range(5):
        services.message_record(
            from_run_id=first.pk, to_run_id=big.children.last().pk, text=f"note {index}"
        )
        services.step_record(run_id=first.pk, kind="model", output=f"turn {index}")

    assert _queries(admin_client, f"{RUNS}{big.pk}/change/") == _queries(
        admin_client, f"{RUNS}{small.pk}/change/"
    )
    page = admin_client.get(f"{RUNS}{first.pk}/change/").content.decode()
    for text in ("check the moon", "note 4", "web_search", "turn 4", "Searching", "tide tables"):
        assert text in page
    root_page = admin_client.get(f"{RUNS}{big.pk}/change/").content.decode()
    assert all(name in root_page for name in ("a", "b", "c", "d", "e"))


def test_links_from_a_run_page_open_its_records(admin_client, tree_factory):
    root = _busy_tree(tree_factory, children=("a", "b"), grandchildren=())
    first = root.children.order_by("id").first()
    page = admin_client.get(f"{RUNS}{first.pk}/change/").content.decode()
    links = re.findall(r'href="(/admin/research/\w+/\?\w+__id__exact=\d+)"', page)

    pages = {link: admin_client.get(html.unescape(link)) for link in links}

    assert len(pages) == 7
    assert {link: response.status_code for link, response in pages.items()} == dict.fromkeys(
        pages, 200
    )
    transcript = next(r for link, r in pages.items() if "/step/" in link)
    assert "web_search" in transcript.content.decode()


def test_cancel_action_cancels_active_runs_and_says_how_many(admin_client, run_factory):
    queued = run_factory()
    working = run_factory()
    services.run_claim(run_id=working.pk)
    done = run_factory()
    services.run_finish(run_id=done.pk, report="the report")

    response = admin_client.post(
        RUNS,
        {"action": "cancel_runs", "_selected_action": [queued.pk, working.pk, done.pk]},
        follow=True,
    )

    assert response.status_code == 200
    assert "Cancelled 2 runs" in response.content.decode()
    queued.refresh_from_db()
    working.refresh_from_db()
    done.refresh_from_db()
    assert (queued.status, queued.error) == (Status.FAILED, "cancelled by the user")
    assert working.status == Status.WORKING
    assert (working.cancel_requested, working.cancel_reason) == (True, "cancelled by the user")
    assert (done.status, done.error, done.cancel_requested) == (Status.DONE, "", False)


def test_deleting_a_root_in_the_admin_removes_its_tree(admin_client, tree_factory):
    root = _busy_tree(tree_factory)
    tree_ids = list(Run.objects.filter(root=root).values_list("pk", flat=True))

    confirm = admin_client.get(f"{RUNS}{root.pk}/delete/")
    response = admin_client.post(f"{RUNS}{root.pk}/delete/", {"post": "yes"})

    assert confirm.status_code == 200
    assert response.status_code == 302
    assert not Run.objects.filter(pk__in=tree_ids).exists()
    assert not RunState.objects.filter(run_id__in=tree_ids).exists()
    assert not Event.objects.filter(root_id=root.pk).exists()


def test_a_sub_agent_is_not_deleted_alone_in_the_admin(admin_client, tree_factory):
    """Deleting a sub-agent, or a research with its sub-agents selected, was a 500 once the
    services refused to delete a sub-agent alone (a research is deleted whole)."""
    root = tree_factory(children=("a", "b"), grandchildren=())
    other = tree_factory(children=("c",), grandchildren=())
    a = root.children.get(name="a")
    c = other.children.get()

    refused = admin_client.post(f"{RUNS}{a.pk}/delete/", {"post": "yes"}, follow=True)
    assert f"Run {a.pk} is a sub-agent of research {root.pk}" in refused.content.decode()
    assert Run.objects.filter(pk=a.pk).exists()
    selected = [root.pk, a.pk, c.pk]  # the whole-tree selection, and another's sub-agent
    confirm = admin_client.post(RUNS, {"action": "delete_selected", "_selected_action": selected})
    response = admin_client.post(
        RUNS,
        {"action": "delete_selected", "_selected_action": selected, "post": "yes"},
        follow=True,
    )

    assert confirm.status_code == 200 and response.status_code == 200
    assert not Run.objects.filter(root=root).exists()
    assert Run.objects.filter(root=other).count() == 2
    assert "Kept 1 sub-agent whose research was not selected" in response.content.decode()


def test_runs_are_not_added_in_the_admin(admin_client):
    assert admin_client.get(f"{RUNS}add/").status_code == 403


def test_what_agents_write_is_read_only(admin_client, tree_factory):
    root = _busy_tree(tree_factory)
    step = Step.objects.first()

    page = admin_client.get(f"{RUNS}{root.pk}/change/").content.decode()
    step_edit = admin_client.post(f"/admin/research/step/{step.pk}/change/", {"output": "x"})

    assert 'name="status"' not in page
    assert 'name="report"' not in page
    assert 'name="cost_usd"' not in page
    assert 'name="topic"' not in page  # fixed by run_start too (see the test below)
    assert step_edit.status_code == 403
    step.refresh_from_db()
    assert step.output == ""


def _form_data(page: str) -> dict[str, str]:
    """What the browser would post back from an admin change page, as it was shown."""
    data = {}
    for tag in re.findall(r"<input\b[^>]*>", page):
        attributes = dict(re.findall(r'(\w[\w-]*)="([^"]*)"', tag))
        if "name" not in attributes or attributes.get("type") in ("submit", "button"):
            continue
        if attributes.get("type") == "checkbox" and "checked" not in tag:
            continue
        data[html.unescape(attributes["name"])] = html.unescape(attributes.get("value", ""))
    return data


FIXED_RUN_FIELDS = [
    "owner",
    "parent",
    "root",
    "model",
    "dataset",
    "depth",
    "name",
    "reason",
    "topic",
    "max_steps",
]


def test_what_run_start_fixed_cannot_be_changed_in_the_admin(
    admin_client, bob, alice, tree_factory
):
    root = tree_factory(children=("history",), grandchildren=())
    child = root.children.get()
    other = tree_factory(owner=bob, children=(), grandchildren=())
    dataset = Dataset.objects.create(owner=bob, name="bob's papers")
    url = f"{RUNS}{child.pk}/change/"
    page = admin_client.get(url).content.decode()
    tampered = {
        "owner": bob.pk,
        "parent": other.pk,
        "root": other.pk,
        "model": "no-price-model",
        "dataset": dataset.pk,
        "depth": 7,
        "name": "renamed",
        "reason": "changed",
        "topic": "another task",
        "max_steps": 99,
    }

    response = admin_client.post(url, {**_form_data(page), **tampered})

    assert response.status_code == 302, "the save went through"
    assert [f for f in FIXED_RUN_FIELDS if f'name="{f}"' in page] == []
    before = {field: getattr(child, field) for field in FIXED_RUN_FIELDS}
    child.refresh_from_db()
    assert {field: getattr(child, field) for field in FIXED_RUN_FIELDS} == before
    assert (child.owner, child.root_id, child.model) == (alice, root.pk, "scripted")


def test_staff_only(client, alice, run_factory):
    run_factory()
    client.force_login(alice)

    response = client.get(RUNS)

    assert response.status_code == 302
    assert response.url.startswith("/admin/login/")


def _one_of_everything(owner, tree_factory) -> None:
    root = _busy_tree(tree_factory, owner=owner)
    child = root.children.first()
    dataset = Dataset.objects.create(owner=owner, name="papers")
    document = Document.objects.create(
        dataset=dataset, title="Tides", text="The moon pulls.", sha256="0" * 64
    )
    Chunk.objects.create(document=document, dataset=dataset, position=0, text="The moon pulls.")
    source = Source.objects.create(
        run=child, root=root, kind="page", url="https://example.org/tides", title="Tides"
    )
    Citation.objects.create(run=root, url=source.url, verified=True, source=source)
    Worker.objects.create(hostname="box", pid=42, heartbeat_at=timezone.now())
    Profile.objects.create(user=owner)
    RemoteServer.objects.create(
        name=f"notes-{owner.pk}", url="https://notes.example/mcp", allowed_tools=["*"]
    )


RESEARCH_MODELS = sorted(
    model._meta.model_name for model in admin.site._registry if model._meta.app_label == "research"
)


@pytest.mark.parametrize("model_name", RESEARCH_MODELS)
def test_every_research_list_and_change_page_loads(admin_client, alice, tree_factory, model_name):
    _one_of_everything(alice, tree_factory)
    model = next(m for m in admin.site._registry if m._meta.model_name == model_name)
    obj = model.objects.order_by("pk").first()

    listing = admin_client.get(f"/admin/research/{model_name}/")
    change = admin_client.get(f"/admin/research/{model_name}/{obj.pk}/change/")

    assert listing.status_code == 200
    assert change.status_code == 200


def test_every_research_list_page_runs_a_fixed_number_of_queries(
    admin_client, alice, bob, charlie, tree_factory
):
    _one_of_everything(alice, tree_factory)
    few = {name: _queries(admin_client, f"/admin/research/{name}/") for name in RESEARCH_MODELS}
    _one_of_everything(bob, tree_factory)
    _one_of_everything(charlie, tree_factory)

    many = {name: _queries(admin_client, f"/admin/research/{name}/") for name in RESEARCH_MODELS}

    assert many == few


def test_document_list_counts_chunks(admin_client, alice):
    dataset = Dataset.objects.create(owner=alice, name="papers")
    document = Document.objects.create(dataset=dataset, title="Tides", text="t", sha256="0" * 64)
    for position in range(3):
        Chunk.objects.create(document=document, dataset=dataset, position=position, text="t")

    page = admin_client.get("/admin/research/document/").content.decode()

    assert f'?document__id__exact={document.pk}">3</a>' in page


DOCUMENT_ADD = "/admin/research/document/add/"


def test_staff_upload_a_markdown_file_to_a_dataset_and_agents_find_it(admin_client, alice):
    dataset = Dataset.objects.create(owner=alice, name="oceans")
    markdown = b"# Tides\n\nThe **moon** pulls the oceans into two bulges every lunar day.\n"

    form = admin_client.get(DOCUMENT_ADD)
    response = admin_client.post(
        DOCUMENT_ADD,
        {
            "dataset": dataset.pk,
            "title": "",
            # Browsers send .md as octet-stream: the extension decides, as in the API.
            "file": SimpleUploadedFile("tides.md", markdown, "application/octet-stream"),
        },
    )

    assert form.status_code == 200
    assert 'enctype="multipart/form-data"' in form.content.decode()
    assert response.status_code == 302
    document = Document.objects.get(dataset=dataset)
    assert (document.title, document.content_type, document.source) == (
        "tides",
        "text/markdown",
        "tides.md",
    )
    assert document.sha256 == hashlib.sha256(markdown).hexdigest()
    (hit,) = search_chunks(dataset_id=dataset.pk, question="lunar bulges")
    assert hit.document_id == document.pk and "moon" in hit.text


def test_an_unsupported_upload_in_the_admin_shows_the_reason_on_the_file_field(admin_client, alice):
    dataset = Dataset.objects.create(owner=alice, name="oceans")

    response = admin_client.post(
        DOCUMENT_ADD,
        {
            "dataset": dataset.pk,
            "title": "A program",
            "file": SimpleUploadedFile("tides.exe", b"MZ\x90\x00", "application/x-msdownload"),
        },
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["file"]
    assert "tides.exe is not a supported type" in errors["file"][0]
    assert "tides.exe is not a supported type" in response.content.decode()
    assert not Document.objects.exists()


def test_an_upload_over_the_limit_is_refused_in_the_admin(admin_client, alice, monkeypatch):
    monkeypatch.setattr(datasets, "MAX_FILE_BYTES", 10)
    dataset = Dataset.objects.create(owner=alice, name="oceans")

    response = admin_client.post(
        DOCUMENT_ADD,
        {"dataset": dataset.pk, "file": SimpleUploadedFile("big.txt", b"x" * 11, "text/plain")},
    )

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["file"] == [
        "big.txt is 11 bytes; the limit is 10."
    ]
    assert not Document.objects.exists()


def test_the_run_list_filters_by_model_and_depth_without_reading_every_run(
    admin_client, tree_factory
):
    root = tree_factory(children=("a", "b"), grandchildren=())

    page = admin_client.get(RUNS).content.decode()
    children = admin_client.get(RUNS, {"depth": "1"}).context["cl"].result_list
    roots = admin_client.get(RUNS, {"depth": "0", "model": root.model}).context["cl"].result_list

    assert "?model=scripted" in page and "?depth=1" in page
    assert sorted(run.name for run in children) == ["a", "b"]
    assert [run.pk for run in roots] == [root.pk]
    with CaptureQueriesContext(connection) as queries:
        admin_client.get(RUNS)
    assert not any("DISTINCT" in query["sql"].upper() for query in queries.captured_queries)


def test_the_owner_filter_offers_me_and_the_owner_clicked_not_every_user(
    admin_client, admin_user, alice, bob, run_factory
):
    run_factory(owner=admin_user, topic="Grebes: the admin's own")
    run_factory(owner=alice, topic="Herons: alice's")
    run_factory(owner=bob, topic="Egrets: bob's")

    page = admin_client.get(RUNS).content.decode()
    # Each owner's name is a link to their runs; the filter lists no user but the viewer.
    link = re.search(r'<a href="(\?owner=\d+)">alice</a>', _row(page, "Herons"))
    assert link and f'?owner={admin_user.pk}"' in page
    filters = page[page.index('id="changelist-filter"') :]
    assert "bob" not in filters and "alice" not in filters and ">me<" in filters

    response = admin_client.get(RUNS + html.unescape(link.group(1)))
    assert [run.topic for run in response.context["cl"].result_list] == ["Herons: alice's"]
    filters = response.content.decode()
    filters = filters[filters.index('id="changelist-filter"') :]
    assert "alice" in filters and "bob" not in filters  # the one chosen, shown as chosen
    mine = admin_client.get(RUNS, {"owner": admin_user.pk}).context["cl"].result_list
    assert [run.topic for run in mine] == ["Grebes: the admin's own"]
    by_name = admin_client.get(RUNS, {"q": "bob"}).context["cl"].result_list
    assert [run.topic for run in by_name] == ["Egrets: bob's"]
    # From a searched, sorted page in a form's lookup popup, the link keeps all that.
    page = admin_client.get(RUNS, {"q": "Herons", "o": "1", "_popup": "1", "_to_field": "id"})
    (href,) = re.findall(r'<a href="\?([^"]+)">alice</a>', page.content.decode())
    assert QueryDict(html.unescape(href)).dict() == {
        "q": "Herons", "o": "1", "_popup": "1", "_to_field": "id", "owner": str(alice.pk)
    }  # fmt: skip


@pytest.mark.parametrize("owner", ["alice", "²", "9" * 5000])
def test_an_owner_that_is_not_an_id_is_refused_not_a_server_error(admin_client, run_factory, owner):
    run_factory()

    response = admin_client.get(RUNS, {"owner": owner})

    assert response.status_code == 302
    assert response.url.endswith("?e=1")


def test_a_depth_that_is_not_a_number_is_refused_not_a_server_error(admin_client, tree_factory):
    tree_factory(children=("a",), grandchildren=())

    response = admin_client.get(RUNS, {"depth": "deep"})

    assert response.status_code == 302
    assert response.url.endswith("?e=1")


def test_a_sub_agents_kind_tier_and_model_show_in_the_list_and_on_its_page(
    admin_client, run_factory, settings
):
    settings.RESEARCH_MODEL_PRICES = {**settings.RESEARCH_MODEL_PRICES, "scripted-small": (1, 1)}
    root = run_factory(topic="Tiered tides")
    checker = services.subagent_spawn(
        parent_id=root.pk,
        name="checker",
        reason="checks the draft",
        task="check the draft against its sources",
        kind="verifier",
        tier="low",
        model="scripted-small",
        tools=["read_page"],
    )

    listed = admin_client.get(RUNS).content.decode()
    row = next(line for line in listed.split("<tr") if ">checker<" in line)
    assert "verifier" in row and "low" in row and "scripted-small" in row

    page = admin_client.get(f"{RUNS}{checker.pk}/change/").content.decode()
    assert "Delegation" in page
    for label, value in (("Kind", "verifier"), ("Tier", "low"), ("Model", "scripted-small")):
        assert re.search(rf"<label>{label}:</label>\s*<div class=\"readonly\">{value}</div>", page)


def _row(page: str, text: str) -> str:
    return next(line for line in page.split("<tr") if text in line)


def test_state_and_transcript_times_show_seconds(admin_client, tree_factory):
    root = _busy_tree(tree_factory, children=("a", "b"), grandchildren=())
    first = root.children.order_by("id").first()
    state = RunState.objects.filter(run=first, state="searching").get()
    step = Step.objects.get(run=first)

    page = admin_client.get(f"{RUNS}{first.pk}/change/").content.decode()
    states = admin_client.get("/admin/research/runstate/").content.decode()
    steps = admin_client.get("/admin/research/step/").content.decode()

    for moment, shown in ((state.at, page), (step.at, page), (state.at, states), (step.at, steps)):
        assert timezone.localtime(moment).strftime("%H:%M:%S") in shown


def test_a_run_page_links_to_the_live_page_of_its_research(admin_client, tree_factory):
    root = tree_factory(children=("a",), grandchildren=())
    child = root.children.get()

    for run in (root, child):
        page = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
        link = re.search(r'<a href="([^"]+)"[^>]*>View on site</a>', page)
        assert link and link.group(1) == f"/runs/{root.pk}/"


def test_the_report_shows_rendered_and_sanitised(admin_client, run_factory):
    run = run_factory()
    report = (
        "# Tides\n\nThe **moon** pulls [the sea](https://example.org/tides).\n\n"
        "- spring\n- neap\n\n<script>alert('x')</script>\n\n[bad](javascript:alert(1))"
    )
    services.run_finish(run_id=run.pk, report=report)

    page = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()

    assert "<h1>Tides</h1>" in page and "<strong>moon</strong>" in page
    assert "<li>spring</li>" in page
    assert re.search(r'<a href="https://example.org/tides"[^>]*rel="noopener', page)
    assert "&lt;script&gt;alert(" in page and "<script>alert(" not in page
    assert 'href="javascript:' not in page


def test_the_admin_and_the_run_page_render_a_report_to_the_same_html():
    from frontend.rendering import render_report
    from research.admin.report import report_html

    text = "# Tides\n\nThe **moon** [pulls](https://example.org/tides). <script>x()</script>"
    page = render_report(text, [], [])
    # The same walls; the page alone gives its headings ids, for its contents to link to.
    assert str(report_html(text)) == re.sub(r' id="[^"]*"', "", page)


def test_a_research_waiting_for_its_plan_review_is_waiting_for_its_owner(
    admin_client, admin_user, alice, run_factory
):
    mine = run_factory(owner=admin_user, topic="Grebes: mine to review", review_plan=True)
    theirs = run_factory(topic="Herons: alice's to review", review_plan=True)
    for root in (mine, theirs):
        services.run_claim(run_id=root.pk)
        services.plan_write(root_id=root.pk, items=["Diving"])
        assert services.plan_pause(root_id=root.pk)

    page = admin_client.get(RUNS).content.decode()

    assert "waiting for you" in _row(page, "Grebes: mine to review")
    assert "waiting for alice" in _row(page, "Herons: alice&#x27;s to review")


def test_the_run_list_shows_how_each_run_ended(admin_client, run_factory):
    done = run_factory(topic="Done: tides")
    services.run_finish(run_id=done.pk, report="the report")
    cancelled = run_factory(topic="Cancelled: herons")
    services.run_cancel(run=cancelled)
    run_factory(topic="Queued: grebes")

    page = admin_client.get(RUNS).content.decode()

    cancelled.refresh_from_db()
    assert cancelled.status == Status.FAILED
    assert '<td class="field-ending">done</td>' in _row(page, "Done: tides")
    assert '<td class="field-ending">cancelled</td>' in _row(page, "Cancelled: herons")
    assert '<td class="field-ending">-</td>' in _row(page, "Queued: grebes")
