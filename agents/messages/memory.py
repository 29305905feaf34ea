"""The in-memory messenger: inboxes as bounded queue.Queue objects, for one process."""

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings

from agents.messages.base import InboxFull, InboxMessage, NoInbox


@dataclass
class MemoryMessenger:
    """Inboxes as bounded queue.Queue objects in a dict guarded by a lock."""

    size: int = field(default_factory=lambda: settings.RESEARCH_INBOX_SIZE)
    _inboxes: dict[int, queue.Queue] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self, *run_ids: int) -> None:
        with self._lock:
            for run_id in run_ids:
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
