"""The live tree's websocket: who may listen, the snapshot, the replay after N, live events.

The application is built as research.asgi builds it (origin check, then auth, then routes);
research.asgi itself is not imported because it starts the agent pool of the web process.
"""

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from channels.testing import WebsocketCommunicator
from django.test import Client

from frontend.consumers import NOT_FOUND, NOT_SIGNED_IN
from frontend.routing import auth_stack, websocket_urlpatterns
from research import services
from research.models import Event, Run

# Each test receives on a channel layer of its own (see the fixture).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("own_channel_layer")]

ORIGIN = b"http://127.0.0.1:8000"


def application():
    return AllowedHostsOriginValidator(auth_stack(URLRouter(websocket_urlpatterns)))


def headers_for(user=None, *, origin: bytes = ORIGIN) -> list[tuple[bytes, bytes]]:
    headers = [(b"origin", origin)]
    if user is not None:
        client = Client()
        client.force_login(user)
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    return headers


async def connected(path: str, headers) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(application(), path, headers=headers)
    ok, _ = await communicator.connect()
    assert ok, "the socket was refused"
    return communicator


async def refused_with(path: str, headers) -> int:
    """Connect, expect a close with a code and nothing else; return the code."""
    communicator = WebsocketCommunicator(application(), path, headers=headers)
    ok, _ = await communicator.connect()
    assert ok, "refusals close with a code after the handshake"
    output = await communicator.receive_output(timeout=2)
    assert output["type"] == "websocket.close", f"sent something before closing: {output}"
    await communicator.disconnect()
    return output["code"]


def _seq(root: Run) -> int:
    return Run.objects.values_list("event_seq", flat=True).get(pk=root.pk)


def test_the_owner_gets_the_snapshot_then_live_events(alice, tree_factory):
    root = tree_factory(children=("history", "ecology"), grandchildren=())
    history, ecology = root.children.order_by("id")
    services.message_record(from_run_id=history.pk, to_run_id=ecology.pk, text="hello ecology")
    headers = headers_for(alice)

    async def scenario():
        socket = await connected(f"/ws/runs/{root.pk}/", headers)
        snapshot = await socket.receive_json_from(timeout=2)
        await database_sync_to_async(services.run_set_state)(
            run_id=history.pk, state="searching", detail="otters"
        )
        live = await socket.receive_json_from(timeout=2)
        await socket.disconnect()
        return snapshot, live

    snapshot, live = async_to_sync(scenario)()

    assert snapshot["type"] == "snapshot"
    assert snapshot["seq"] == _seq(root) - 1
    assert [run["id"] for run in snapshot["runs"]] == [root.pk, history.pk, ecology.pk]
    assert [run["name"] for run in snapshot["runs"]] == ["", "history", "ecology"]
    assert snapshot["messages"][0]["text"] == "hello ecology"
    assert snapshot["messages"][0]["run"] == history.pk
    assert snapshot["messages"][0]["to"] == ecology.pk
    assert live["seq"] == snapshot["seq"] + 1
    assert (live["type"], live["run"], live["state"], live["detail"]) == (
        "run.state",
        history.pk,
        "searching",
        "otters",
    )


def test_after_n_replays_exactly_the_missing_events_then_live_ones(alice, tree_factory):
    root = tree_factory(children=("history", "ecology"), grandchildren=())
    for index in range(4):
        services.run_set_state(run_id=root.pk, state="thinking", detail=f"round {index}")
    stored = list(Event.objects.filter(root=root).values_list("payload", flat=True))
    headers = headers_for(alice)

    async def scenario():
        socket = await connected(f"/ws/runs/{root.pk}/?after=3", headers)
        replayed = [await socket.receive_json_from(timeout=2) for _ in stored[3:]]
        nothing_more = await socket.receive_nothing(timeout=0.3)
        await database_sync_to_async(services.run_finish)(run_id=root.pk, report="The report.")
        live = [await socket.receive_json_from(timeout=2) for _ in range(2)]
        await socket.disconnect()
        return replayed, nothing_more, live

    replayed, nothing_more, live = async_to_sync(scenario)()

    assert replayed == stored[3:]
    assert nothing_more
    assert [(event["seq"], event["type"]) for event in live] == [
        (len(stored) + 1, "run.report"),
        (len(stored) + 2, "run.finished"),
    ]


def test_after_the_last_number_sends_nothing_until_something_happens(alice, run_factory):
    root = run_factory()
    headers = headers_for(alice)
    path = f"/ws/runs/{root.pk}/?after={_seq(root)}"

    async def scenario():
        socket = await connected(path, headers)
        quiet = await socket.receive_nothing(timeout=0.3)
        await socket.disconnect()
        return quiet

    assert async_to_sync(scenario)()


def test_another_user_is_refused_exactly_like_a_missing_research(bob, run_factory):
    root = run_factory()
    headers = headers_for(bob)

    async def scenario():
        return (
            await refused_with(f"/ws/runs/{root.pk}/", headers),
            await refused_with(f"/ws/runs/{root.pk + 1000}/", headers),
        )

    assert async_to_sync(scenario)() == (NOT_FOUND, NOT_FOUND)


def test_a_sub_agent_is_not_a_tree_to_follow(alice, tree_factory):
    root = tree_factory(children=("history",), grandchildren=())
    headers = headers_for(alice)
    path = f"/ws/runs/{root.children.get().pk}/"

    async def scenario():
        return await refused_with(path, headers)

    assert async_to_sync(scenario)() == NOT_FOUND


def test_an_anonymous_visitor_is_refused(run_factory):
    root = run_factory()

    async def scenario():
        return await refused_with(f"/ws/runs/{root.pk}/", headers_for(None))

    assert async_to_sync(scenario)() == NOT_SIGNED_IN


def test_a_page_of_another_origin_cannot_open_the_socket(alice, run_factory):
    root = run_factory()
    headers = headers_for(alice, origin=b"http://evil.example")

    async def scenario():
        communicator = WebsocketCommunicator(application(), f"/ws/runs/{root.pk}/", headers)
        ok, _ = await communicator.connect()
        return ok

    assert async_to_sync(scenario)() is False


def test_a_number_beyond_the_last_event_gets_a_fresh_snapshot(alice, run_factory):
    root = run_factory()
    headers = headers_for(alice)
    path = f"/ws/runs/{root.pk}/?after={_seq(root) + 50}"

    async def scenario():
        socket = await connected(path, headers)
        first = await socket.receive_json_from(timeout=2)
        await socket.disconnect()
        return first

    snapshot = async_to_sync(scenario)()

    assert (snapshot["type"], snapshot["seq"]) == ("snapshot", _seq(root))
    assert [run["id"] for run in snapshot["runs"]] == [root.pk]


def test_live_events_of_agents_writing_at_once_arrive_in_number_order(alice, tree_factory):
    """Six agents of one tree change state from their own threads at once; the browser
    receives every event, each after the one numbered before it."""
    import threading

    from django.db import connection

    from research import selectors

    root = tree_factory(children=("a", "b", "c", "d", "e"), grandchildren=())
    runs = [root, *root.children.order_by("id")]
    for run in runs:
        services.run_claim(run_id=run.pk)
    facts = [selectors.run_facts(run=Run.objects.get(pk=run.pk)) for run in runs]
    rounds = 15
    barrier = threading.Barrier(len(facts))
    headers = headers_for(alice)

    def write(run_facts) -> None:
        try:
            barrier.wait()
            for index in range(rounds):
                services.run_set_state(
                    run_id=run_facts.run_id, state="searching", detail=str(index), facts=run_facts
                )
        finally:
            connection.close()

    async def scenario() -> list[int]:
        socket = await connected(f"/ws/runs/{root.pk}/", headers)
        await socket.receive_json_from(timeout=2)  # the snapshot
        threads = [threading.Thread(target=write, args=(f,)) for f in facts]
        for thread in threads:
            thread.start()
        seqs = [
            (await socket.receive_json_from(timeout=5))["seq"] for _ in range(len(facts) * rounds)
        ]
        for thread in threads:
            thread.join()
        await socket.disconnect()
        return seqs

    seqs = async_to_sync(scenario)()

    assert seqs == list(range(seqs[0], seqs[0] + len(facts) * rounds))


def test_a_handshake_does_not_wait_for_the_shared_sync_thread(alice, tree_factory):
    """Django and Channels run thread-sensitive sync code (every sync view) on one shared
    thread; a page that keeps it busy must not hold up the websocket's snapshot."""
    import asyncio
    import time

    from asgiref.sync import sync_to_async

    root = tree_factory(children=("a",), grandchildren=())
    headers = headers_for(alice)

    async def scenario() -> float:
        busy = asyncio.ensure_future(sync_to_async(time.sleep, thread_sensitive=True)(3))
        await asyncio.sleep(0.1)  # the shared thread is now asleep in a "slow view"
        started = time.monotonic()
        socket = await connected(f"/ws/runs/{root.pk}/", headers)
        snapshot = await socket.receive_json_from(timeout=2)
        took = time.monotonic() - started
        await socket.disconnect()
        await busy
        assert snapshot["type"] == "snapshot"
        return took

    assert async_to_sync(scenario)() < 2


def test_events_committed_together_reach_the_browser_one_frame_each_in_order(alice, run_factory):
    """A batch's events travel the channel layer as one message (frontend.delivery); the
    browser still receives each as its own frame, numbered in order, as the contract says."""
    from django.db import transaction

    from research.events import RunStateChanged
    from research.events.store import allocate_seqs, publish_all

    root = run_factory(owner=alice)
    headers = headers_for(alice)

    def commit_three() -> None:
        with transaction.atomic():
            first = allocate_seqs(root_id=root.pk, count=3)
            publish_all(
                root_id=root.pk,
                events=[
                    (root.pk, RunStateChanged(status="working", state=state, detail=detail))
                    for state, detail in [("thinking", "1"), ("searching", "2"), ("reading", "3")]
                ],
                first_seq=first,
            )

    async def scenario() -> list[dict]:
        socket = await connected(f"/ws/runs/{root.pk}/", headers)
        await socket.receive_json_from(timeout=2)  # the snapshot
        await database_sync_to_async(commit_three)()
        frames = [await socket.receive_json_from(timeout=5) for _ in range(3)]
        assert await socket.receive_nothing(timeout=0.5)
        await socket.disconnect()
        return frames

    frames = async_to_sync(scenario)()

    assert [frame["type"] for frame in frames] == ["run.state"] * 3
    assert [frame["detail"] for frame in frames] == ["1", "2", "3"]
    assert [frame["seq"] for frame in frames] == [frames[0]["seq"] + n for n in range(3)]


def test_a_copy_of_an_event_the_socket_sent_is_not_sent_again(alice, run_factory):
    """After a Redis outage a push is sent again several times (frontend.delivery): the
    socket sends each event once, in whatever order the live ones come."""
    from channels.layers import get_channel_layer

    from frontend.delivery import EVENTS_MESSAGE, group_name

    root = run_factory(owner=alice)
    headers = headers_for(alice)
    after = _seq(root)

    def event(seq: int) -> dict:
        return {"seq": seq, "type": "run.state", "run": root.pk, "at": "", "detail": str(seq)}

    async def scenario() -> list[int]:
        socket = await connected(f"/ws/runs/{root.pk}/?after={after}", headers)
        layer = get_channel_layer()
        for seqs in ([after + 2], [after + 1, after + 2], [after + 2], [after + 1, after + 3]):
            message = {"type": EVENTS_MESSAGE, "events": [event(seq) for seq in seqs]}
            await layer.group_send(group_name(root.pk), message)
        frames = [await socket.receive_json_from(timeout=5) for _ in range(3)]
        assert await socket.receive_nothing(timeout=0.5)
        await socket.disconnect()
        return [frame["seq"] for frame in frames]

    assert async_to_sync(scenario)() == [after + 2, after + 1, after + 3]


def test_while_redis_is_down_sockets_are_closed_and_the_log_says_so_twice(
    alice, run_factory, layer_on_own_redis, caplog
):
    """With the channel layer's Redis down a viewer's socket can get no channel and join no
    group: it is closed before its handshake (the page retries), a socket that leaves then
    leaves quietly, and the log says once that the layer is down and once that it answers
    again, where daphne logged a traceback for every socket."""
    root = run_factory()
    headers = headers_for(alice)
    path = f"/ws/runs/{root.pk}/"

    with layer_on_own_redis() as server, caplog.at_level("WARNING", logger="frontend.routing"):

        async def scenario() -> tuple[list, dict]:
            staying = await connected(path, headers)
            await staying.receive_json_from(timeout=2)  # its snapshot
            server.stop()
            refused = []
            for _ in range(3):
                communicator = WebsocketCommunicator(application(), path, headers=headers)
                refused.append(await communicator.connect(timeout=10))
            await staying.disconnect()  # leaves its group while Redis is down: no error
            server.start()
            for _ in range(50):  # the page retries until the layer takes its socket again
                socket = WebsocketCommunicator(application(), path, headers=headers)
                if (await socket.connect(timeout=10))[0]:
                    break
                await asyncio.sleep(0.2)
            snapshot = await socket.receive_json_from(timeout=5)
            await socket.disconnect()
            return refused, snapshot

        refused, snapshot = async_to_sync(scenario)()

    # The layer finds its connection dead on the first use after the stop (channels_redis
    # writes a subscription on it before it reads the error): from then on, closed.
    assert [accepted for accepted, _ in refused][1:] == [False, False]
    assert snapshot["type"] == "snapshot"
    lines = [r.getMessage() for r in caplog.records if r.name == "frontend.routing"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("viewers' sockets cannot reach the channel layer")
    assert lines[1].startswith("the channel layer answers again: ")
    # The two refused, and the one that left when its leaving met the dead connection.
    assert int(lines[1].split(": ")[1].split()[0]) >= 2


def test_a_socket_whose_first_read_fails_leaves_no_channel_in_the_group(
    alice, run_factory, monkeypatch, settings
):
    """The group is joined before the database is read; when that read fails (the database
    gone), the socket's channel leaves the group again, or every event of the tree would be
    copied to a channel nobody reads."""
    from channels.layers import channel_layers, get_channel_layer
    from django.db import OperationalError

    from frontend.delivery import group_name

    # The in-memory layer, whose groups can be read back.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    root = run_factory()
    headers = headers_for(alice)

    def gone(**kwargs):
        raise OperationalError("the database is gone")

    monkeypatch.setattr("frontend.consumers.selectors.tree_snapshot", gone)

    async def scenario() -> None:
        communicator = WebsocketCommunicator(application(), f"/ws/runs/{root.pk}/", headers=headers)
        with pytest.raises(OperationalError):
            await communicator.connect(timeout=5)

    async_to_sync(scenario)()
    layer = get_channel_layer()
    assert not layer.groups.get(group_name(root.pk))
