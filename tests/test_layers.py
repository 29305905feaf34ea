"""The channel layer of a single process (frontend.layers): what Channels' in-memory layer
does, without its per-message tasks, copies and sweeps. A real daphne serving two viewers on
it is in test_live_socket."""

import asyncio

import pytest

from frontend import layers
from frontend.layers import LocalChannelLayer

EVENTS = {"type": "tree.events", "events": [{"seq": 1, "type": "run.state", "detail": "x"}]}


def run(scenario):
    return asyncio.run(scenario())


def test_every_channel_of_a_group_gets_the_message_and_no_other_channel_does():
    async def scenario():
        layer = LocalChannelLayer()
        first, second, outsider = [await layer.new_channel() for _ in range(3)]
        await layer.group_add("tree-1", first)
        await layer.group_add("tree-1", second)
        await layer.group_add("tree-2", outsider)
        await layer.group_send("tree-1", EVENTS)
        got = [await layer.receive(first), await layer.receive(second)]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(layer.receive(outsider), 0.1)
        return got

    first, second = run(scenario)
    assert first == EVENTS and second == EVENTS


def test_a_channel_that_left_its_group_gets_nothing_more():
    async def scenario():
        layer = LocalChannelLayer()
        channel = await layer.new_channel()
        await layer.group_add("tree-1", channel)
        await layer.group_discard("tree-1", channel)
        await layer.group_send("tree-1", EVENTS)
        await asyncio.wait_for(layer.receive(channel), 0.1)

    with pytest.raises(TimeoutError):
        run(scenario)


def test_a_full_channel_misses_a_group_message_and_the_others_still_get_it():
    async def scenario():
        layer = LocalChannelLayer(capacity=2)
        slow, quick = [await layer.new_channel() for _ in range(2)]
        await layer.group_add("tree-1", slow)
        await layer.group_add("tree-1", quick)
        for seq in (1, 2, 3):
            await layer.group_send("tree-1", {"type": "tree.events", "events": [{"seq": seq}]})
            message = await layer.receive(quick)
            assert message["events"] == [{"seq": seq}]
        return [(await layer.receive(slow))["events"][0]["seq"] for _ in range(2)]

    assert run(scenario) == [1, 2]


def test_a_direct_send_past_the_capacity_says_the_channel_is_full():
    from channels.exceptions import ChannelFull

    async def scenario():
        layer = LocalChannelLayer(capacity=1)
        channel = await layer.new_channel()
        await layer.send(channel, EVENTS)
        await layer.send(channel, EVENTS)

    with pytest.raises(ChannelFull):
        run(scenario)


def test_an_expired_message_is_swept_with_its_channel_from_the_groups(monkeypatch):
    """Nobody read it within the layer's expiry: the consumer is gone. The sweep (at most
    once every SWEEP_SECONDS) drops the message and takes the channel out of its groups."""
    monkeypatch.setattr(layers, "SWEEP_SECONDS", 0.05)

    async def scenario():
        layer = LocalChannelLayer(expiry=0.05)
        gone = await layer.new_channel()
        await layer.group_add("tree-1", gone)
        await layer.group_send("tree-1", EVENTS)
        await asyncio.sleep(0.12)
        await layer.group_send("tree-1", EVENTS)  # sweeps first
        return layer.channels, layer.groups["tree-1"]

    channels, members = run(scenario)
    assert channels == {} and members == {}


def test_the_sweep_runs_at_most_once_a_period(monkeypatch):
    sweeps = []
    monkeypatch.setattr(
        "channels.layers.InMemoryChannelLayer._clean_expired", lambda self: sweeps.append(1)
    )

    async def scenario():
        layer = LocalChannelLayer()
        channel = await layer.new_channel()
        await layer.group_add("tree-1", channel)
        for _ in range(50):
            await layer.group_send("tree-1", EVENTS)
            await layer.receive(channel)

    run(scenario)
    assert len(sweeps) == 1
