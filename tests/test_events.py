"""Stored events: numbered per tree without gaps, served after a number, safe under threads."""

import asyncio
import contextlib
import random
import threading
import time

import pytest
from django.db import connection

from research import events, services
from research.events import RunStateChanged
from research.models import Event

URL = "/v1/gb/research"
# The tests that listen receive on a channel layer of their own (see the fixture).
pytestmark = pytest.mark.usefixtures("own_channel_layer")


def _seqs(root_id: int) -> list[int]:
    return list(Event.objects.filter(root_id=root_id).values_list("seq", flat=True))


@pytest.mark.django_db
def test_every_change_of_a_tree_is_an_event_numbered_from_one(tree_factory):
    root = tree_factory(children=("a", "b"), grandchildren=())
    a = root.children.get(name="a")
    services.run_claim(run_id=root.pk)
    services.run_set_state(run_id=root.pk, state="thinking")
    services.run_finish(run_id=a.pk, report="a's report")

    events = list(Event.objects.filter(root=root))

    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    assert [event.type for event in events] == [
        "run.created",
        "run.created",
        "run.created",
        "run.state",
        "run.state",
        "run.report",
        "run.finished",
    ]
    assert all(event.payload["seq"] == event.seq for event in events)
    assert all(event.payload["type"] == event.type for event in events)


@pytest.mark.django_db
def test_trees_are_numbered_independently(tree_factory):
    first = tree_factory(children=("a",), grandchildren=())
    second = tree_factory(children=("a", "b"), grandchildren=())

    assert _seqs(first.pk) == [1, 2]
    assert _seqs(second.pk) == [1, 2, 3]


@pytest.mark.django_db
def test_events_after_n_come_back_in_order_with_none_missing(api, tree_factory):
    root = tree_factory(children=("a", "b"), grandchildren=("x",))
    for index in range(5):
        services.run_set_state(run_id=root.pk, state="thinking", detail=f"round {index}")
    total = Event.objects.filter(root=root).count()

    everything = api.get(f"{URL}/{root.pk}/events").json()
    after_three = api.get(f"{URL}/{root.pk}/events", {"after": 3}).json()
    after_last = api.get(f"{URL}/{root.pk}/events", {"after": total}).json()

    assert [event["seq"] for event in everything] == list(range(1, total + 1))
    assert [event["seq"] for event in after_three] == list(range(4, total + 1))
    assert after_three == everything[3:]
    assert after_last == []
    assert after_three[-1]["payload"]["detail"] == "round 4"


@pytest.mark.django_db
def test_a_sub_agents_events_are_its_trees(api, tree_factory):
    root = tree_factory(children=("a",), grandchildren=("x",))
    grandchild = root.children.get().children.get()

    from_root = api.get(f"{URL}/{root.pk}/events").json()
    from_grandchild = api.get(f"{URL}/{grandchild.pk}/events").json()

    assert from_grandchild == from_root


@pytest.mark.django_db
@pytest.mark.parametrize("after", ["abc", "-1", "2.5"])
def test_bad_after_is_a_400_naming_it(api, run_factory, after):
    root = run_factory()

    response = api.get(f"{URL}/{root.pk}/events", {"after": after})

    assert response.status_code == 400
    assert "after" in response.json()


@pytest.mark.django_db(transaction=True)
def test_publishers_on_many_threads_get_distinct_gapless_numbers(run_factory):
    root = run_factory()
    threads_count, per_thread = 6, 15
    barrier = threading.Barrier(threads_count)
    errors: list[BaseException] = []

    def publish_many(thread: int) -> None:
        try:
            barrier.wait()
            for index in range(per_thread):
                events.publish(
                    root_id=root.pk,
                    run_id=root.pk,
                    payload=RunStateChanged(
                        status="working", state="thinking", detail=f"{thread}/{index}"
                    ),
                )
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=publish_many, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    seqs = _seqs(root.pk)
    assert seqs == list(range(1, len(seqs) + 1))
    payloads = Event.objects.filter(root=root, type="run.state").values_list("payload", flat=True)
    details = [p["detail"].split("/") for p in payloads.order_by("seq") if "/" in p["detail"]]
    assert len(details) == threads_count * per_thread
    for thread in range(threads_count):
        indexes = [int(index) for who, index in details if who == str(thread)]
        # Each thread's own events are numbered in the order it published them.
        assert indexes == list(range(per_thread))
    root.refresh_from_db()
    assert root.event_seq == seqs[-1]


# --- Pushing in order ------------------------------------------------------------------------


def _pushed(root_id: int, deliver, expected: int) -> tuple[list[int], float]:
    """The numbers the channel layer hands a listener of the tree while `deliver` runs (until
    `expected` came and then a quiet second), and how long the last expected one took.

    A loop of its own (asyncio.run), not async_to_sync: asgiref may hand the coroutine to a
    loop an earlier test left recorded for this thread."""
    from channels.layers import get_channel_layer

    from frontend import delivery as transport

    layer = get_channel_layer()

    async def listen() -> tuple[list[int], float]:
        channel = await layer.new_channel()
        await layer.group_add(transport.group_name(root_id), channel)
        started = time.monotonic()
        deliver()
        seqs: list[int] = []
        took = float("inf")
        try:
            while True:
                wait = 10 if len(seqs) < expected else 1  # then: does anything else come?
                message = await asyncio.wait_for(layer.receive(channel), wait)
                # Events released together travel as one message (frontend.delivery).
                for event in message["events"]:
                    seqs.append(event["seq"])
                    if len(seqs) == expected:
                        took = time.monotonic() - started
        except TimeoutError:
            return seqs, took
        finally:
            await layer.group_discard(transport.group_name(root_id), channel)

    return asyncio.run(listen())


def _event(seq: int) -> dict:
    return {"seq": seq, "type": "run.state", "run": 1, "at": "", "detail": str(seq)}


def test_an_event_committed_before_a_lower_number_waits_for_it():
    from frontend import delivery as transport

    root_id = 10_000_001

    def deliver() -> None:
        transport.expect(root_id, 5, 2)  # two numbers reserved, in this order
        transport.broadcast(root_id, [_event(6)])  # the second commits first
        transport.broadcast(root_id, [_event(5)])

    assert _pushed(root_id, deliver, expected=2)[0] == [5, 6]


def test_events_released_by_many_threads_at_once_all_arrive_once_in_release_order():
    """Agent threads and the writer release events while the sender's loop takes them: one
    wake-up of the loop carries every release made meanwhile, and none may be left behind
    or overtaken (frontend.delivery._Sender.put). No number is reserved first, so each
    release goes as it comes (the sequencer holds nothing): what arrives is each number
    once, and each thread's in the order it released them."""
    from frontend import delivery as transport

    root_id = 10_000_004
    total, threads_count = 600, 6
    numbers = list(range(1, total + 1))
    random.Random(4).shuffle(numbers)
    shares = [numbers[n::threads_count] for n in range(threads_count)]
    barrier = threading.Barrier(threads_count)

    def release(share: list[int]) -> None:
        barrier.wait()
        for seq in share:
            transport.broadcast(root_id, [_event(seq)])

    def deliver() -> None:
        threads = [threading.Thread(target=release, args=(share,)) for share in shares]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)

    arrived = _pushed(root_id, deliver, expected=total)[0]
    assert sorted(arrived) == list(range(1, total + 1))
    position = {seq: index for index, seq in enumerate(arrived)}
    for share in shares:
        assert sorted(share, key=position.__getitem__) == share


def test_many_trees_released_at_once_each_arrive_once_in_order_through_redis():
    """With Redis's pub/sub layer (the tests' layer, as production's) a publisher thread
    sends what queued meanwhile in one round trip, each tree's releases joined into one
    message (frontend.publisher): every tree's listener gets its own events, each once and
    in the order released, and none of another tree's."""
    from channels.layers import get_channel_layer
    from channels_redis.pubsub import RedisPubSubChannelLayer

    from frontend import delivery as transport

    layer = get_channel_layer()
    assert isinstance(layer, RedisPubSubChannelLayer)
    roots = [10_000_011, 10_000_012, 10_000_013]
    per_tree, threads_count = 120, 4
    barrier = threading.Barrier(threads_count)

    def release(thread: int) -> None:
        barrier.wait()
        for seq in range(thread + 1, per_tree + 1, threads_count):
            for root_id in roots:
                transport.broadcast(root_id, [_event(seq)])

    async def listen() -> dict[int, list[int]]:
        channels = {}
        for root_id in roots:
            channels[root_id] = await layer.new_channel()
            await layer.group_add(transport.group_name(root_id), channels[root_id])
        threads = [threading.Thread(target=release, args=(n,)) for n in range(threads_count)]
        for thread in threads:
            thread.start()
        arrived: dict[int, list[int]] = {root_id: [] for root_id in roots}
        for root_id, channel in channels.items():
            with contextlib.suppress(TimeoutError):
                while True:
                    wait = 10 if len(arrived[root_id]) < per_tree else 0.5
                    message = await asyncio.wait_for(layer.receive(channel), wait)
                    arrived[root_id] += [event["seq"] for event in message["events"]]
        for thread in threads:
            thread.join(10)
        return arrived

    arrived = asyncio.run(listen())

    for root_id in roots:
        assert sorted(arrived[root_id]) == list(range(1, per_tree + 1)), root_id
        for thread in range(threads_count):  # each thread's releases in its order
            mine = [
                seq
                for seq in arrived[root_id]
                if seq % threads_count == (thread + 1) % threads_count
            ]
            assert mine == sorted(mine), (root_id, thread)


def test_a_layer_with_a_prefix_of_its_own_still_gets_the_pushes(settings):
    """An operator who shares Redis sets the layer's prefix: the publisher writes to the
    channels that layer listens on, not to the default ones."""
    from channels.layers import channel_layers

    config = {"hosts": [{"address": settings.REDIS_URL}], "prefix": "canopy-shared"}
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": PUBSUB, "CONFIG": config}}
    channel_layers.backends.clear()
    root_id = 10_000_021

    assert _pushed(root_id, lambda: _broadcast(root_id, 1), expected=1)[0] == [1]


def test_a_sentinels_layer_keeps_its_own_group_send():
    """The publisher takes plain addresses only; hosts found through Redis Sentinel are the
    layer's to resolve, so its own group_send pushes for them."""
    from channels_redis.pubsub import RedisPubSubChannelLayer

    from frontend.publisher import publishes_to

    sentinel = {"master_name": "canopy", "sentinels": [("127.0.0.1", 26379)]}
    assert not publishes_to(RedisPubSubChannelLayer(hosts=[sentinel]))
    assert publishes_to(RedisPubSubChannelLayer(hosts=[{"address": "redis://127.0.0.1:6379/0"}]))


def test_a_sender_whose_loop_has_closed_refuses_every_put_not_only_the_first():
    """A server stopping closes the loop its sender wakes: each put says so, rather than
    the first failing and the later ones piling up unseen."""
    from frontend import delivery as transport

    loop = asyncio.new_event_loop()
    sender = transport._Sender(loop)
    loop.close()
    for _ in range(2):
        with pytest.raises(RuntimeError, match="closed"):
            sender.put(10_000_005, [_event(1)])
    assert not sender._incoming  # nothing kept that no loop will ever send


@pytest.mark.parametrize("root_id", [10_000_002, 10_000_003])
def test_a_number_that_never_commits_holds_the_later_ones_only_briefly(root_id):
    from frontend import delivery as transport

    def deliver() -> None:
        transport.expect(root_id, 1, 2)  # number 1 rolls back and never comes
        transport.broadcast(root_id, [_event(2)])

    # The second time, the sweeper had nothing to hold and slept: the hold wakes it.
    assert not transport._sequencer.holding()
    seqs, took = _pushed(root_id, deliver, expected=1)
    assert seqs == [2]
    # It waited for number 1 its hold (the sweeper looks five times a hold), not for ever;
    # the upper bound leaves room for a loaded machine.
    assert transport.HOLD_SECONDS * 0.9 <= took < 4 * transport.HOLD_SECONDS


def test_events_pushed_after_redis_restarted_reach_the_listeners(layer_on_own_redis):
    """The sender's connection to Redis dies with a restart; the first push after it goes out
    again on a fresh one instead of leaving the open sockets a gap."""
    with layer_on_own_redis("channels_redis.core.RedisChannelLayer") as server:
        root_id = 10_000_003
        first = _pushed(root_id, lambda: _broadcast(root_id, 1), expected=1)[0]
        server.stop()
        server.start()
        second = _pushed(root_id, lambda: _broadcast(root_id, 2), expected=1)[0]

    assert (first, second) == ([1], [2])


def test_with_pubsub_events_pushed_while_redis_was_down_reach_the_socket_that_stayed(
    layer_on_own_redis,
):
    """With Redis's pub/sub layer (the default) nothing closes a viewer's socket while Redis
    is down, so nothing would tell its page what it missed: a push that failed is sent again
    once Redis is back, and reaches the subscription that outlived the outage."""
    from channels.layers import get_channel_layer

    from frontend import delivery as transport

    with layer_on_own_redis(PUBSUB) as server:
        layer = get_channel_layer()
        root_id = 10_000_004

        async def listen() -> list[int]:
            channel = await layer.new_channel()
            await layer.group_add(transport.group_name(root_id), channel)
            server.stop()
            _broadcast(root_id, 1)  # Redis is down: this push fails
            await asyncio.sleep(0.5)
            server.start()
            message = await asyncio.wait_for(layer.receive(channel), 20)
            return [event["seq"] for event in message["events"]]

        assert asyncio.run(listen()) == [1]


def test_a_worker_that_exits_waits_until_redis_has_taken_what_it_pushed_while_down(
    layer_on_own_redis,
):
    """A worker about to exit flushes its pushes. One that failed while Redis was down waits
    to be sent again; the flush waits for Redis to take it (the first try again comes after
    a second), not only for the queue, or the worker would take the events with it."""
    from frontend import delivery as transport

    with layer_on_own_redis(PUBSUB) as server:
        server.stop()
        _broadcast(10_000_005, 1)  # fails: Redis is down
        took: list[float] = []

        def flush() -> None:
            started = time.monotonic()
            transport.flush(timeout=10)
            took.append(time.monotonic() - started)

        # The flush in a thread: the server is started from this one (a server's process
        # ends with the thread that started it, tests.servers).
        flushing = threading.Thread(target=flush)
        flushing.start()
        time.sleep(0.3)
        server.start()
        flushing.join(15)

    assert transport.RESEND_SECONDS[0] * 0.9 <= took[0] < 8, took


def test_a_redis_outage_logs_when_pushes_start_failing_and_when_they_work_again(
    caplog, layer_on_own_redis
):
    """A busy process releases hundreds of events a second: while Redis is down, each
    release and each try again would be a line of the log. The publisher says once that
    pushes fail and once that Redis takes them again, with how many had failed."""
    from frontend import delivery as transport

    with layer_on_own_redis(PUBSUB) as server:
        root_id = 10_000_031
        _broadcast(root_id, 1)
        transport.flush(timeout=5)  # connected while Redis is up
        server.stop()
        with caplog.at_level("WARNING", logger="frontend.publisher"):
            for seq in range(2, 8):  # six releases, each its own failed push
                _broadcast(root_id, seq)
                time.sleep(0.05)
            time.sleep(1.2)  # the first tries again fail too
            server.start()
            transport.flush(timeout=10)

    lines = [record.getMessage() for record in caplog.records]
    assert sum("pushing events to Redis failed" in line for line in lines) == 1, lines
    assert [line for line in lines if "takes events again" in line] == [
        "Redis takes events again: 6 events had failed to push; they are sent again"
    ], lines
    assert len(lines) == 2, lines


PUBSUB = "channels_redis.pubsub.RedisPubSubChannelLayer"


def _broadcast(root_id: int, seq: int) -> None:
    from frontend import delivery as transport

    transport.broadcast(root_id, [_event(seq)])
