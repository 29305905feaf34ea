"""The Messenger contract, passed by the in-memory messenger and the Redis one alike."""

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from agents.messages import InboxFull, InboxMessage, MemoryMessenger, Messenger, NoInbox
from agents.messages.redis import RedisMessenger
from tests.conftest import PROJECT

SIZE = 64
INBOX = 101


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    yield client
    client.close()


@pytest.fixture
def prefix(redis_client) -> Iterator[str]:
    """A key prefix of this test alone: other tests and helpers share the Redis database."""
    prefix = f"test-inbox:{uuid.uuid4().hex}"
    yield prefix
    keys = list(redis_client.scan_iter(f"{prefix}:*"))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture(params=["memory", "redis"])
def messenger(request) -> Messenger:
    if request.param == "memory":
        return MemoryMessenger(size=SIZE)
    client, prefix = request.getfixturevalue("redis_client"), request.getfixturevalue("prefix")
    return RedisMessenger(client, size=SIZE, prefix=prefix)


def message(text: str, *, to_id: int = INBOX, from_id: int = 7) -> InboxMessage:
    return InboxMessage(
        from_id=from_id,
        from_name=f"agent-{from_id}",
        to_id=to_id,
        text=text,
        sent_at=timezone.now(),
        record_id=from_id * 1000,
    )


def texts(messages: list[InboxMessage]) -> list[str]:
    return [m.text for m in messages]


def test_a_message_is_received_whole_and_only_once(messenger):
    messenger.open(INBOX)
    sent = message("the 1997 figures are in table 3 — see “Appendix B”")
    messenger.send(sent)

    assert messenger.receive(INBOX) == [sent]
    assert messenger.receive(INBOX) == []


def test_receive_takes_every_message_oldest_first(messenger):
    messenger.open(INBOX)
    for i in range(5):
        messenger.send(message(f"note {i}"))

    assert texts(messenger.receive(INBOX)) == [f"note {i}" for i in range(5)]


def test_sending_to_an_inbox_never_opened_raises_no_inbox(messenger):
    with pytest.raises(NoInbox):
        messenger.send(message("anyone there?", to_id=999))


def test_sending_after_close_raises_no_inbox_and_unread_messages_are_dropped(messenger):
    messenger.open(INBOX)
    messenger.send(message("unread"))
    messenger.close(INBOX)

    with pytest.raises(NoInbox):
        messenger.send(message("too late"))
    messenger.open(INBOX)
    assert messenger.receive(INBOX) == []


def test_opening_twice_keeps_the_messages_already_sent(messenger):
    """A parent opens a child's inbox at spawn and the child opens it again when it starts: a
    sibling's message sent between the two must survive."""
    messenger.open(INBOX)
    messenger.send(message("sent before the agent started"))
    messenger.open(INBOX)

    assert texts(messenger.receive(INBOX)) == ["sent before the agent started"]


def test_a_spawn_opens_all_its_childrens_inboxes_at_once(messenger):
    children = [INBOX + 1, INBOX + 2, INBOX + 3]
    messenger.open(*children)
    for child in children:
        messenger.send(message(f"to {child}", to_id=child))

    assert [texts(messenger.receive(child)) for child in children] == [
        [f"to {child}"] for child in children
    ]


def test_an_inbox_closed_then_opened_again_takes_messages(messenger):
    """The Redis messenger skips opening an inbox it opened moments ago; one it closed since
    is opened for real."""
    messenger.open(INBOX)
    messenger.close(INBOX)
    messenger.open(INBOX)
    messenger.send(message("after the reopen"))

    assert texts(messenger.receive(INBOX)) == ["after the reopen"]


def test_an_inbox_whose_keys_expired_is_opened_again(redis_client, prefix):
    messenger = RedisMessenger(redis_client, size=SIZE, prefix=prefix, ttl_seconds=1)
    messenger.open(INBOX)
    time.sleep(1.2)
    messenger.open(INBOX)
    messenger.send(message("after the keys expired"))

    assert texts(messenger.receive(INBOX)) == ["after the keys expired"]


def test_sixty_fifth_message_is_refused_at_once_with_inbox_full(messenger):
    messenger.open(INBOX)
    for i in range(SIZE):
        messenger.send(message(f"m{i}"))

    started = time.monotonic()
    with pytest.raises(InboxFull):
        messenger.send(message("one too many"))
    assert time.monotonic() - started < 0.2  # refused, not blocked until there is room

    assert len(messenger.receive(INBOX)) == SIZE
    messenger.send(message("room again"))
    assert texts(messenger.receive(INBOX)) == ["room again"]


def test_receive_with_a_wait_returns_as_soon_as_a_message_arrives(messenger):
    messenger.open(INBOX)
    sender = threading.Timer(0.3, lambda: messenger.send(message("late news")))
    sender.start()

    started = time.monotonic()
    received = messenger.receive(INBOX, wait=10)
    elapsed = time.monotonic() - started
    sender.join()

    assert texts(received) == ["late news"]
    assert 0.2 < elapsed < 1.5


def test_receive_with_a_wait_and_no_message_returns_nothing_after_the_wait(messenger):
    messenger.open(INBOX)

    started = time.monotonic()
    assert messenger.receive(INBOX, wait=0.6) == []
    assert 0.55 <= time.monotonic() - started < 1.5


def test_receive_stops_waiting_when_cancelled(messenger):
    messenger.open(INBOX)
    cancelled = threading.Event()
    threading.Timer(0.3, cancelled.set).start()

    started = time.monotonic()
    assert messenger.receive(INBOX, wait=30, cancelled=cancelled.is_set) == []
    assert time.monotonic() - started < 1.5


def test_receive_without_an_inbox_returns_nothing_without_waiting(messenger):
    started = time.monotonic()
    assert messenger.receive(999, wait=5) == []
    assert time.monotonic() - started < 0.5


def test_many_senders_at_once_lose_nothing_and_duplicate_nothing(messenger):
    """Eight senders against a receiver that drains while they send, through a 64-message
    inbox that fills up: every message arrives exactly once, each sender's in its order."""
    senders, per_sender = 8, 60
    messenger.open(INBOX)
    received: list[InboxMessage] = []
    done = threading.Event()

    def send_all(sender: int) -> None:
        for i in range(per_sender):
            while True:
                try:
                    messenger.send(message(f"{sender}:{i}", from_id=sender))
                    break
                except InboxFull:
                    time.sleep(0.005)

    def receive_all() -> None:
        deadline = time.monotonic() + 20
        while len(received) < senders * per_sender and time.monotonic() < deadline:
            received.extend(messenger.receive(INBOX, wait=0.5))
        done.set()

    receiver = threading.Thread(target=receive_all)
    receiver.start()
    threads = [threading.Thread(target=send_all, args=(s,)) for s in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    receiver.join(20)

    assert done.is_set()
    got = texts(received)
    assert sorted(got) == sorted(f"{s}:{i}" for s in range(senders) for i in range(per_sender))
    for sender in range(senders):
        mine = [int(t.split(":")[1]) for t in got if t.startswith(f"{sender}:")]
        assert mine == list(range(per_sender))
    assert messenger.receive(INBOX) == []


def test_the_inbox_of_an_agent_killed_with_its_process_expires(redis_client, prefix):
    """An agent killed with its process never closes its inbox: the keys must not stay in
    Redis for ever, nor be found by a later run that gets the same id (a new database)."""
    messenger = RedisMessenger(redis_client, size=SIZE, prefix=prefix, ttl_seconds=1)
    messenger.open(INBOX)
    messenger.send(message("never read"))

    time.sleep(1.2)
    with pytest.raises(NoInbox):
        messenger.send(message("too late"))
    assert list(redis_client.scan_iter(f"{prefix}:*")) == []


def test_a_message_sent_from_another_process_reaches_the_inbox(redis_client, prefix):
    """What the Redis messenger is for: the sender and the receiver in different processes."""
    here = RedisMessenger(redis_client, size=SIZE, prefix=prefix)
    here.open(INBOX)
    script = f"""
import redis
from agents.messages import InboxMessage
from agents.messages.redis import RedisMessenger
there = RedisMessenger(redis.Redis.from_url({settings.REDIS_URL!r}), size={SIZE},
                       prefix={prefix!r})
there.send(InboxMessage(from_id=3, from_name="sibling", to_id={INBOX}, text="from afar"))
"""
    sender = subprocess.Popen([sys.executable, "-c", script], cwd=PROJECT)

    received = here.receive(INBOX, wait=20)
    assert sender.wait(20) == 0
    assert [(m.from_name, m.text) for m in received] == [("sibling", "from afar")]
