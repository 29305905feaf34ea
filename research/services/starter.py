"""The starter knowledge base: CPython's language reference topics (`pydoc_data.topics`).

Every machine has them, so the offline demo model answers from real documents with no
network and no upload. Each user gets their own copy on first need (datasets are owned).
"""

import platform

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from research.fulltext import STARTER_DATASET
from research.models import Dataset
from research.services.datasets import dataset_create, document_add


def starter_topics() -> dict[str, str]:
    from pydoc_data.topics import topics

    return dict(sorted(topics.items()))


@transaction.atomic
def starter_dataset_load(*, owner: AbstractBaseUser) -> tuple[Dataset, bool, int]:
    """The owner's starter dataset, created or completed: (dataset, created, topics added).
    Idempotent: a second call adds only missing topics (none, unless Python changed)."""
    dataset = Dataset.objects.filter(owner=owner, name=STARTER_DATASET).first()
    created = dataset is None
    if created:
        dataset = dataset_create(
            owner=owner,
            name=STARTER_DATASET,
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
            title_given=False,  # a topic's name ("compound"): its text's heading names it
            copies=True,  # some topics share their text ("if" and another)
            source=f"pydoc_data.topics[{topic!r}] (Python {platform.python_version()})",
        )
        added += 1
    return dataset, created, added
