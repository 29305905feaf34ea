"""Every event type has a schema, and every event the services store, serve and push fits it."""

import re

import jsonschema
import pytest

from research import selectors, services
from research.events.payloads import EVENT_TYPES, schema
from research.models import Event, Run, RunState

URL = "/v1/gb/research"


@pytest.fixture
def busy_tree(tree_factory):
    """A tree whose history holds every event type once at least."""
    root = tree_factory(children=("a", "b"), grandchildren=())
    a, b = root.children.get(name="a"), root.children.get(name="b")
    services.run_claim(run_id=root.pk)
    services.run_claim(run_id=a.pk)
    services.run_set_state(run_id=a.pk, state="searching", detail="tides")
    services.usage_add(run_id=a.pk, input_tokens=1200, output_tokens=300, latency_ms=40)
    services.message_record(from_run_id=a.pk, to_run_id=b.pk, text="I take the moon")
    services.note_send(run=a, author_id=root.owner_id, text="Mind the spring tides")
    services.plan_write(root_id=root.pk, items=["Tides", "The moon"])
    services.run_finish(run_id=a.pk, report="Tides follow the moon.")
    services.run_finish(run_id=b.pk, error="cancelled by the user")
    Run.objects.filter(pk=root.pk).update(clarify=True)
    services.clarify_ask(root_id=root.pk, questions=["Spring or neap tides?"])
    services.clarify_answer(run=root, answers=["Spring tides"])
    return root


@pytest.mark.django_db
@pytest.mark.parametrize("event_type", EVENT_TYPES)
def test_every_stored_event_of_a_type_fits_its_schema(busy_tree, event_type):
    payloads = list(
        Event.objects.filter(root=busy_tree, type=event_type).values_list("payload", flat=True)
    )

    assert payloads, f"the tree has no {event_type} event"
    for payload in payloads:
        jsonschema.validate(payload, schema(event_type))


@pytest.mark.django_db
@pytest.mark.parametrize("event_type", EVENT_TYPES)
def test_a_schema_refuses_an_event_with_a_missing_or_extra_key(busy_tree, event_type):
    payload = Event.objects.filter(root=busy_tree, type=event_type).first().payload
    missing = {key: value for key, value in payload.items() if key != "run"}

    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(missing, schema(event_type))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**payload, "surprise": 1}, schema(event_type))


@pytest.mark.django_db
def test_the_events_endpoint_serves_the_stored_payloads_unchanged(api, busy_tree):
    served = api.get(f"{URL}/{busy_tree.pk}/events").json()

    stored = list(Event.objects.filter(root=busy_tree).order_by("seq"))
    assert [event["payload"] for event in served] == [event.payload for event in stored]


@pytest.mark.django_db
def test_run_created_carries_the_run_exactly_as_the_api_shows_it(api, busy_tree):
    child = busy_tree.children.get(name="a")
    created = Event.objects.get(root=busy_tree, type="run.created", payload__run=child.pk)
    shown = api.get(f"{URL}/{child.pk}").json()

    # The same fields, and the same values for those that have not changed since.
    assert created.payload["data"].keys() == shown.keys()
    for key in ("id", "parent_id", "root_id", "depth", "name", "reason", "topic", "created_at"):
        assert created.payload["data"][key] == shown[key]


@pytest.mark.django_db
def test_a_new_run_reads_the_same_in_its_event_and_in_the_api(api, run_factory):
    root = run_factory()

    created = Event.objects.get(root=root, type="run.created").payload["data"]

    assert created == api.get(f"{URL}/{root.pk}").json()
    assert (created["cost_usd"], created["tree_cost_usd"]) == ("0.00000000", "0.00000000")


@pytest.mark.django_db
def test_a_snapshot_message_is_the_run_message_event_without_its_envelope(busy_tree):
    events = Event.objects.filter(root=busy_tree, type="run.message").order_by("seq")
    snapshot = selectors.tree_snapshot(root=busy_tree)

    # A message between siblings and a note from the analyst, each as its event shows it.
    assert len(snapshot["messages"]) == len(events) == 2
    envelope = {"seq", "type", "at"}
    for message, event in zip(snapshot["messages"], events, strict=True):
        assert message == {k: v for k, v in event.payload.items() if k not in envelope}
    assert [m["from_analyst"] for m in snapshot["messages"]] == [False, True]


@pytest.mark.django_db
def test_every_time_in_an_event_is_written_one_way_utc_as_z(busy_tree, api):
    """One timestamp format: events, their envelope and the REST API alike."""
    utc = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
    times = [
        value
        for payload in Event.objects.filter(root=busy_tree).values_list("payload", flat=True)
        for key, value in _flatten(payload)
        if key in ("at", "started_at", "finished_at", "created_at", "sent_at") and value
    ]
    assert {"at", "started_at", "finished_at", "sent_at"} <= {
        key
        for payload in Event.objects.filter(root=busy_tree).values_list("payload", flat=True)
        for key, value in _flatten(payload)
        if value
    }
    assert times and all(utc.fullmatch(value) for value in times), times
    assert utc.fullmatch(api.get(f"/v1/gb/research/{busy_tree.pk}").json()["created_at"])


def _flatten(value, key=""):
    if isinstance(value, dict):
        for inner, item in value.items():
            yield from _flatten(item, inner)
    elif isinstance(value, list):
        for item in value:
            yield from _flatten(item, key)
    else:
        yield key, value


def test_an_event_keeps_the_plan_it_was_given_when_the_caller_changes_the_list_later():
    """An event's fields are stored and pushed after the transaction: a list or dict the
    payload was made from is copied, so a later change to it is not in the event."""
    from research.events.payloads import RunPlan

    items = [{"title": "history", "status": "pending"}]
    fields = RunPlan(version=1, items=items, author="lead", approved=False).fields()
    items[0]["status"] = "done"
    items.append({"title": "ecology", "status": "pending"})

    assert fields == {
        "version": 1,
        "items": [{"title": "history", "status": "pending"}],
        "author": "lead",
        "approved": False,
    }


@pytest.mark.django_db
def test_a_snapshot_run_is_the_tree_endpoints_with_its_latest_states_detail(api, busy_tree):
    tree = api.get(f"{URL}/{busy_tree.pk}/tree").json()
    snapshot = selectors.tree_snapshot(root=busy_tree)

    # A working run's clock runs between the two reads.
    def same(run: dict) -> dict:
        return {k: v for k, v in run.items() if k not in ("detail", "worked_seconds")}

    assert [same(run) for run in snapshot["runs"]] == [same(run) for run in tree]
    for run in snapshot["runs"]:
        latest = RunState.objects.filter(run_id=run["id"]).latest("id")
        assert run["detail"] == latest.detail
    assert {run["detail"] for run in snapshot["runs"]} >= {"cancelled by the user"}
    assert snapshot["seq"] == Event.objects.filter(root=busy_tree).count()
