"""Create the "Python reference" dataset from the language reference topics that ship with
CPython (`pydoc_data.topics`), so the offline demo answers questions from real documents on a
machine with no network and no upload.

Idempotent: a second run adds only the topics that are missing (none, unless Python changed).
"""

import platform

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from research.knowledge import STARTER_DATASET as STARTER_NAME
from research.models import Dataset
from research.services.knowledge import dataset_create, document_add


def starter_topics() -> dict[str, str]:
    from pydoc_data.topics import topics

    return dict(sorted(topics.items()))


class Command(BaseCommand):
    help = f"Create the {STARTER_NAME!r} dataset from CPython's pydoc topics (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--user", help="the username that owns the dataset (default: the first superuser)"
        )

    def _owner(self, username: str | None):
        users = get_user_model().objects
        if username:
            owner = users.filter(username=username).first()
            if owner is None:
                raise CommandError(f"no user named {username!r}: create it first.")
            return owner
        owner = users.filter(is_superuser=True).order_by("pk").first()
        if owner is None:
            raise CommandError("no superuser to own the dataset: pass --user.")
        return owner

    @transaction.atomic
    def handle(self, *args, user: str | None, **options):
        owner = self._owner(user)
        dataset = Dataset.objects.filter(owner=owner, name=STARTER_NAME).first()
        created = dataset is None
        if created:
            dataset = dataset_create(
                owner=owner,
                name=STARTER_NAME,
                description=(
                    f"The Python {platform.python_version()} language reference topics that "
                    "ship with CPython (pydoc_data.topics), one document per topic."
                ),
            )
        present = set(dataset.documents.values_list("title", flat=True))
        added = 0
        for topic, text in starter_topics().items():
            if topic in present:
                continue
            document_add(
                dataset=dataset,
                title=topic,
                data=text.encode(),
                filename=f"{topic}.txt",
                source=f"pydoc_data.topics[{topic!r}] (Python {platform.python_version()})",
            )
            added += 1
        chunks = dataset.chunks.count()
        verb = "Created" if created else "Updated" if added else "Kept"
        self.stdout.write(
            self.style.SUCCESS(
                f"{verb} dataset {STARTER_NAME!r} (id {dataset.pk}) of {owner.get_username()}: "
                f"{added} topics added, {dataset.documents.count()} documents, {chunks} chunks."
            )
        )
