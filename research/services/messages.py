"""The stored transcript of sibling messages (the inbox itself lives in the messenger).

An agent's message is stored, then put in the inbox, then published: the row exists (so
the reader can mark it read) before the message can be read, and the page draws an arrow
only for a message that reached its inbox. One the inbox refused is withdrawn.
"""

from functools import cache

from django.db import transaction
from django.utils import timezone

from research.clean import strip_controls
from research.events import RunMessage, publish
from research.models import Message, Run
from research.sql import Insert, one


def message_store(*, from_run_id: int, to_run_id: int, text: str) -> Message:
    """The row of a sibling's message, in one INSERT built once (every message an agent
    sends: through the ORM its create cost more than the statement)."""
    message = Message(from_run_id=from_run_id, to_run_id=to_run_id, text=strip_controls(text))
    _message_insert().create([message])
    return message


@cache
def _message_insert() -> Insert:
    return Insert.every(Message)


@transaction.atomic
def message_publish(*, message: Message) -> None:
    """The `run.message` event of a stored message, with both agents' names, read together."""
    row = one(_names_sql(), [message.to_run_id, message.from_run_id])
    if row is None or row[2] is None:
        raise Run.DoesNotExist(f"run {message.from_run_id} or {message.to_run_id} is gone")
    root_id, from_name, to_name = row
    publish(
        root_id=root_id,
        run_id=message.from_run_id,
        payload=RunMessage.of(message, from_name=from_name, to_name=to_name),
    )


@cache
def _names_sql() -> str:
    runs = Run._meta.db_table
    return (
        f"SELECT s.root_id, s.name, (SELECT r.name FROM {runs} r WHERE r.id = %s) "
        f"FROM {runs} s WHERE s.id = %s"
    )


def message_withdraw(*, message: Message) -> None:
    """Forget a message its recipient's inbox refused (it ended, or its inbox is full)."""
    Message.objects.filter(pk=message.pk).delete()


@transaction.atomic
def message_record(*, from_run_id: int, to_run_id: int, text: str) -> Message:
    """Store and publish a message at once (for messages that need no delivery)."""
    message = message_store(from_run_id=from_run_id, to_run_id=to_run_id, text=text)
    message_publish(message=message)
    return message


def messages_mark_read(*, message_ids: list[int]) -> None:
    Message.objects.filter(pk__in=message_ids, read_at__isnull=True).update(read_at=timezone.now())
