"""Create the "Python reference" dataset from the language reference topics that ship with
CPython (`pydoc_data.topics`), so the offline demo answers questions from real documents on a
machine with no network and no upload.

Idempotent: a second run adds only the topics that are missing (none, unless Python changed).
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from research.fulltext import STARTER_DATASET as STARTER_NAME
from research.services.starter import starter_dataset_load


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

    def handle(self, *args, user: str | None, **options):
        owner = self._owner(user)
        dataset, created, added = starter_dataset_load(owner=owner)
        verb = "Created" if created else "Updated" if added else "Kept"
        self.stdout.write(
            self.style.SUCCESS(
                f"{verb} dataset {STARTER_NAME!r} (id {dataset.pk}) of {owner.get_username()}: "
                f"{added} topics added, {dataset.documents.count()} documents, "
                f"{dataset.chunks.count()} chunks."
            )
        )
