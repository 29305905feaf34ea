"""The live tree over a real websocket: daphne serving the app and its agents, a browser's
socket, every event type the server sends."""

import json

import httpx
import pytest
from rest_framework.authtoken.models import Token

from agents.llm.scripted import call, calls, reply, slow
from research.events import EVENT_TYPES
from research.models import Event, Run
from tests.conftest import receive_until_root_finished, start_daphne, wait_for, watch

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def api_client(server, user) -> httpx.Client:
    token, _ = Token.objects.get_or_create(user=user)
    return httpx.Client(
        base_url=f"{server.url}/v1/gb", headers={"Authorization": f"Token {token.key}"}, timeout=10
    )


def spawn(name: str, task: str, item: int):
    return call("spawn_subagent", name=name, reason=f"{name} covers it", task=task, plan_item=item)


def test_every_event_type_reaches_a_viewer_whose_socket_stays_open_across_the_two_pauses(
    daphne_server, scripted_llm, alice
):
    """The lead asks its questions (run.clarify), then its plan waits for review: one socket
    sees both pauses and everything after them."""
    topic = "Herons: wading and nesting"
    scripted_llm.script(
        topic,
        call("ask_clarifying_questions", questions=["Grey herons or all herons?"]),
        call("write_plan", items=["How herons wade", "Where herons nest"]),
        calls(spawn("wading", "how herons wade", 1), spawn("nesting", "where herons nest", 2)),
        call("wait_subagents"),
        reply("the heron report"),
    )
    scripted_llm.script(
        "how herons wade",
        slow(0.3, call("send_message", to="nesting", text="they stand in the shallows")),
        reply("wading done"),
    )
    scripted_llm.script(
        "where herons nest", call("read_messages", wait_seconds=10), reply("nesting done")
    )
    with api_client(daphne_server, alice) as client:
        started = client.post(
            "/research", json={"topic": topic, "review_plan": True, "clarify": True}
        )
        assert started.status_code == 201, started.text
        root_id = started.json()["id"]
        with watch(daphne_server, root_id, after=0) as socket:
            # Its state is clarifying while the lead asks; paused once the questions wait.
            wait_for(lambda: client.get(f"/research/{root_id}").json()["status"] == "paused")
            asked = drain(socket)
            answered = client.post(f"/research/{root_id}/clarify", json={"answers": ["Grey"]})
            assert answered.status_code == 200, answered.text
            wait_for(lambda: client.get(f"/research/{root_id}").json()["state"] == "reviewing")
            wait_for(lambda: client.get(f"/research/{root_id}").json()["status"] == "paused")
            before_approval = asked + drain(socket)
            approved = client.post(f"/research/{root_id}/plan/approve", json={})
            assert approved.status_code == 200, approved.text
            after_approval = receive_until_root_finished(socket, root_id)

    received = before_approval + after_approval
    assert {event["type"] for event in received} == set(EVENT_TYPES)
    clarify = [event for event in received if event["type"] == "run.clarify"]
    assert [(event["answers"], event["skipped"]) for event in clarify] == [
        (None, False),
        (["Grey"], False),
    ]
    assert clarify[0]["questions"] == ["Grey herons or all herons?"]
    assert clarify[0] in asked  # the question came live, while the lead waited
    # The approval's own plan event came live, and the socket carried on past it.
    assert "run.plan" in [event["type"] for event in after_approval]
    assert after_approval[-1]["type"] != "run.plan"
    # Nothing lost or repeated on the way: the tree's numbers, each once.
    numbers = sorted(event["seq"] for event in received)
    assert numbers == list(range(1, len(numbers) + 1))
    root = Run.objects.get(pk=root_id)
    assert root.status == "done" and root.report.startswith("the heron report")


def test_without_redis_two_viewers_of_a_tree_each_get_every_event_once(
    transactional_db, scripted_llm, settings, tmp_path, alice
):
    """The embedded default (`make run`: no REDIS_URL) serves its sockets from Channels'
    in-memory layer, here frontend.layers.LocalChannelLayer, where the viewers of a tree share
    one message per push instead of a copy each: both get the same frames, every stored
    event once (live events of several agents may come a little out of order, and the page
    puts them in order by number)."""
    server = start_daphne(settings, tmp_path, REDIS_URL="")
    topic = "Kingfishers: diving and nesting"
    scripted_llm.script(
        topic,
        # The sockets open during this first call: what follows reaches them live, through
        # the layer, not from the stored events they are sent on connecting.
        slow(
            1.0,
            calls(
                call("spawn_subagent", name="diving", reason="one side", task="how they dive"),
                call("spawn_subagent", name="nesting", reason="the other", task="their nests"),
            ),
        ),
        call("wait_subagents"),
        reply("the kingfisher report"),
    )
    scripted_llm.script("how they dive", reply("diving done"))
    scripted_llm.script("their nests", reply("nesting done"))
    try:
        with api_client(server, alice) as client:
            root = client.post("/research", json={"topic": topic})
            assert root.status_code == 201, root.text
            root_id = root.json()["id"]
            with (
                watch(server, root_id, after=0) as first,
                watch(server, root_id, after=0) as second,
            ):
                seen = [receive_until_root_finished(socket, root_id) for socket in (first, second)]
    finally:
        server.stop()

    stored = list(Event.objects.filter(root_id=root_id).order_by("seq").values_list("seq", "type"))
    assert Run.objects.filter(root_id=root_id).count() == 3  # the root and its two children
    assert [kind for _, kind in stored].count("run.finished") == 3
    for events in seen:
        assert sorted((event["seq"], event["type"]) for event in events) == stored
    assert sorted(seen[0], key=lambda event: event["seq"]) == sorted(
        seen[1], key=lambda event: event["seq"]
    )


def drain(socket, quiet: float = 0.5) -> list[dict]:
    """Whatever the socket has sent until it is quiet for `quiet` seconds."""
    received = []
    while True:
        try:
            received.append(json.loads(socket.recv(timeout=quiet)))
        except TimeoutError:
            return received
