"""The messenger's interface: inboxes keyed by run id, nothing else (seed 000).

It knows nothing of names or siblings: who may message whom is decided by the team tools
(agents.tools.team). A send never blocks: a full inbox refuses rather than making two agents
wait on each other.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

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
    def open(self, *run_ids: int) -> None:
        """Open these inboxes, or keep them open: what was sent to one since its first open
        stays. A spawn opens all its children's at once."""
        ...

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
