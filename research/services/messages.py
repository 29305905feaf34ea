"""The stored transcript of sibling messages (the inbox itself lives in agents.messages)."""

from django.db import transaction
from django.utils import timezone

from research.models import Message, Run
from research.services.events import publish


@transaction.atomic
def message_record(*, from_run_id: int, to_run_id: int, text: str) -> Message:
    message = Message.objects.create(from_run_id=from_run_id, to_run_id=to_run_id, text=text)
    sender = Run.objects.only("root_id", "name").get(pk=from_run_id)
    recipient_name = Run.objects.values_list("name", flat=True).get(pk=to_run_id)
    publish(
        root_id=sender.root_id,
        type="run.message",
        run_id=from_run_id,
        id=message.pk,
        to=to_run_id,
        from_name=sender.name,
        to_name=recipient_name,
        text=text,
        sent_at=message.sent_at.isoformat(),
    )
    return message


def messages_mark_read(*, message_ids: list[int]) -> None:
    Message.objects.filter(pk__in=message_ids, read_at__isnull=True).update(read_at=timezone.now())
