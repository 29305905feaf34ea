"""Reads of the knowledge base: an owner's datasets and a dataset's documents."""

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, QuerySet
from django.db.models.functions import Left

from research.errors import NotFound
from research.fulltext import HEAD_CHARS
from research.models import Dataset, Document


def dataset_list(*, owner: AbstractBaseUser) -> QuerySet[Dataset]:
    """The owner's datasets, each with `document_count`, in one query."""
    # GROUP BY drops Meta.ordering: order again, or pages could repeat or skip datasets.
    return (
        Dataset.objects.filter(owner=owner)
        .annotate(document_count=Count("documents"))
        .order_by("name", "id")
    )


def dataset_get(*, owner: AbstractBaseUser, dataset_id: int) -> Dataset:
    """One of the owner's datasets with `document_count`; another user's is not found."""
    dataset = dataset_list(owner=owner).filter(pk=dataset_id).first()
    if dataset is None:
        raise NotFound(f"no dataset with id {dataset_id}.")
    return dataset


def document_list(*, dataset: Dataset) -> QuerySet[Document]:
    """The dataset's documents with `chunk_count` and `head` (the start of the text, which
    names a document given no title: research.fulltext.document_heading), without their
    text (it can be megabytes)."""
    return (
        Document.objects.filter(dataset=dataset)
        .defer("text")
        .annotate(chunk_count=Count("chunks"), head=Left("text", HEAD_CHARS))
        .order_by("id")
    )


def document_get(*, dataset: Dataset, document_id: int) -> Document:
    """One document of the dataset (read it through `dataset_get`, scoped to its owner)."""
    document = document_list(dataset=dataset).filter(pk=document_id).first()
    if document is None:
        raise NotFound(f"no document with id {document_id} in this dataset.")
    return document


def remembered_facts(*, document_ids: set[int]) -> dict[int, tuple[str, str]]:
    """Which of these documents are facts an agent remembered: id -> (its source, the name
    of the agent that remembered it)."""
    rows = Document.objects.filter(pk__in=document_ids, remembered_by__isnull=False).values_list(
        "pk", "source", "remembered_by__name"
    )
    return {pk: (source, name) for pk, source, name in rows}
