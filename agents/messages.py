"""The message system between agents: inboxes keyed by run id, nothing else (seed 000).

It knows nothing of names or siblings: who may message whom is decided in agents.team. A
send never blocks: a full inbox refuses rather than making two agents wait on each other.
Implementations: `MemoryMessenger` (one process, the default) and
`agents.messages_redis.RedisMessenger` (a tree's agents in several processes).
"""

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from django.conf import settings
from django.utils import timezone


class NoInbox(Exception):
    """The recipient has no inbox: it ended (or never started)."""


class InboxFull(Exception):
    """The recipient has RESEARCH_INBOX_SIZE unread messages."""


@dataclass
class InboxMessage:
    from_id: int
    from_name: str
    to_id: int
    text: str
    sent_at: datetime | None = None
    # The stored transcript row (research.models.Message), marked read when received.
    record_id: int | None = None


class Messenger(Protocol):
    def open(self, run_id: int) -> None: ...

    def close(self, run_id: int) -> None: ...

    def send(self, message: InboxMessage) -> None:
        """Put the message in the recipient's inbox at once, or raise NoInbox / InboxFull."""
        ...

    def receive(
        self, run_id: int, wait: float = 0, cancelled: Callable[[], bool] | None = None
    ) -> list[InboxMessage]:
        """Take out every message, waiting up to `wait` seconds for the first one."""
        ...


def send_message(messenger: Messenger, message: InboxMessage) -> None:
    """The one place every agent sends through."""
    message.sent_at = timezone.now()
    messenger.send(message)


@dataclass
class MemoryMessenger:
    """Inboxes as bounded queue.Queue objects in a dict guarded by a lock."""

    size: int = field(default_factory=lambda: settings.RESEARCH_INBOX_SIZE)
    _inboxes: dict[int, queue.Queue] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self, run_id: int) -> None:
        with self._lock:
            self._inboxes.setdefault(run_id, queue.Queue(maxsize=self.size))

    def close(self, run_id: int) -> None:
        # Forget the queue without draining it: a late sender gets NoInbox, never an error.
        with self._lock:
            self._inboxes.pop(run_id, None)

    def _inbox(self, run_id: int) -> queue.Queue | None:
        with self._lock:
            return self._inboxes.get(run_id)

    def send(self, message: InboxMessage) -> None:
        inbox = self._inbox(message.to_id)
        if inbox is None:
            raise NoInbox(message.to_id)
        try:
            inbox.put_nowait(message)
        except queue.Full:
            raise InboxFull(message.to_id) from None

    def receive(
        self, run_id: int, wait: float = 0, cancelled: Callable[[], bool] | None = None
    ) -> list[InboxMessage]:
        inbox = self._inbox(run_id)
        if inbox is None:
            return []
        messages = _drain(inbox)
        deadline = time.monotonic() + wait
        while not messages and (left := deadline - time.monotonic()) > 0:
            if cancelled is not None and cancelled():
                break
            try:
                messages.append(inbox.get(timeout=min(left, 0.25)))
            except queue.Empty:
                continue
            messages.extend(_drain(inbox))
        return messages


def _drain(inbox: queue.Queue) -> list[InboxMessage]:
    messages = []
    while True:
        try:
            messages.append(inbox.get_nowait())
        except queue.Empty:
            return messages


_messenger: Messenger | None = None
_messenger_lock = threading.Lock()


def get_messenger() -> Messenger:
    """The process's messenger, chosen by RESEARCH_MESSENGER (memory or redis)."""
    global _messenger
    with _messenger_lock:
        if _messenger is None:
            if settings.RESEARCH_MESSENGER == "redis":
                from agents.messages_redis import RedisMessenger

                _messenger = RedisMessenger.from_url(settings.REDIS_URL)
            else:
                _messenger = MemoryMessenger()
        return _messenger
