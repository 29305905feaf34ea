"""The stored transcript of sibling messages (the inbox itself lives in the messenger).

An agent's message is stored, then put in the inbox, then published: the row exists (so
the reader can mark it read) before the message can be read, and the page draws an arrow
only for a message that reached its inbox. One the inbox refused is withdrawn.
"""

from django.db import transaction
from django.utils import timezone

from research.clean import strip_controls
from research.events import RunMessage, publish
from research.models import Message, Run


def message_store(*, from_run_id: int, to_run_id: int, text: str) -> Message:
    return Message.objects.create(
        from_run_id=from_run_id, to_run_id=to_run_id, text=strip_controls(text)
    )


@transaction.atomic
def message_publish(*, message: Message) -> None:
    sender = Run.objects.only("root_id", "name").get(pk=message.from_run_id)
    recipient_name = Run.objects.values_list("name", flat=True).get(pk=message.to_run_id)
    publish(
        root_id=sender.root_id,
        run_id=message.from_run_id,
        payload=RunMessage.of(message, from_name=sender.name, to_name=recipient_name),
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
