"""The knowledge base's writes: datasets, their documents (text extracted, chunked for search)
and the facts agents remember. Reads are in `research.selectors.knowledge`."""

import hashlib
from pathlib import PurePath

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction

from research import endings
from research.clean import strip_controls, visible
from research.errors import Conflict, InvalidInput
from research.fulltext import chunk_text, document_headings, normalise_text
from research.models import ACTIVE_STATUSES, Chunk, Dataset, Document, Run, Status
from research.text import UnreadableFile, declared_charset, decode, html_text, pdf_text

MAX_FILE_BYTES = 25 * 1024 * 1024
FACT_MAX_CHARS = 4000
TEXT, MARKDOWN, HTML, PDF = "text/plain", "text/markdown", "text/html", "application/pdf"
# The extension decides first: browsers send .md files as application/octet-stream.
TYPES_BY_EXTENSION = {
    ".txt": TEXT,
    ".text": TEXT,
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".html": HTML,
    ".htm": HTML,
    ".pdf": PDF,
}
SUPPORTED_TYPES = frozenset(TYPES_BY_EXTENSION.values())
_NAME_MAX = Dataset._meta.get_field("name").max_length
_TITLE_MAX = Document._meta.get_field("title").max_length
_SOURCE_MAX = Document._meta.get_field("source").max_length


# --- Datasets --------------------------------------------------------------------------------


def dataset_create(*, owner: AbstractBaseUser, name: str, description: str = "") -> Dataset:
    name = strip_controls(name or "").strip()
    description = strip_controls(description or "")
    if not visible(name):
        raise InvalidInput("name must not be empty.", field="name")
    if len(name) > _NAME_MAX:
        raise InvalidInput(f"name is longer than {_NAME_MAX} characters.", field="name")
    taken = InvalidInput(f"you already have a knowledge base named {name!r}.", field="name")
    if Dataset.objects.filter(owner=owner, name=name).exists():
        raise taken
    try:
        # Two requests creating the same name at once both pass the check above; the unique
        # constraint refuses the second, in a savepoint so the caller's transaction lives on.
        with transaction.atomic():
            return Dataset.objects.create(owner=owner, name=name, description=description or "")
    except IntegrityError:
        raise taken from None


@transaction.atomic
def dataset_delete(*, dataset: Dataset) -> None:
    """Delete a dataset with its documents and chunks; runs that used it keep their sources.
    Refused while a research that searches it has not ended: one waiting for its analyst's
    answers went on without it and reported the query tool's error as its finding."""
    Dataset.objects.select_for_update().filter(pk=dataset.pk).first()  # starts wait for this
    roots = Run.objects.filter(dataset=dataset, parent__isnull=True).order_by("pk")
    working = list(roots.filter(status__in=ACTIVE_STATUSES).values_list("pk", flat=True)[:4])
    if working:
        raise Conflict(_in_use(dataset, working, "not ended", "cancel {them} or let {them} end"))
    # An interrupted research resumes on its dataset: gone, it would go on without it.
    ended = roots.filter(status=Status.FAILED).values_list("pk", "error")
    resumable = [pk for pk, error in ended if endings.resumable(status=Status.FAILED, error=error)]
    if resumable:
        raise Conflict(
            _in_use(
                dataset,
                resumable[:4],
                "been stopped and can still be resumed",
                "resume {them} and let {them} end, or delete {them}",
            )
        )
    dataset.delete()


def _in_use(dataset: Dataset, run_ids: list[int], standing: str, remedy: str) -> str:
    """'knowledge base "Estuaries" is searched by research 12, which has not ended: cancel
    it or let it end, then delete the knowledge base.'"""
    one = len(run_ids) == 1
    named = ", ".join(map(str, run_ids[:3])) + (" and more" if len(run_ids) > 3 else "")
    them = "it" if one else "them"
    return (
        f'knowledge base "{dataset.name}" is searched by research{"" if one else "es"} {named}, '
        f"which {'has' if one else 'have'} {standing}: {remedy.format(them=them)}, then delete "
        "the knowledge base."
    )


# --- Documents -------------------------------------------------------------------------------


def file_size_check(*, size: int | None, filename: str) -> None:
    """Refuse a file over MAX_FILE_BYTES (`file`); callers with an upload check its declared
    size with this before reading it into memory."""
    if size is not None and size > MAX_FILE_BYTES:
        raise InvalidInput(
            f"{filename or 'the file'} is {size:,} bytes; the limit is {MAX_FILE_BYTES:,}.",
            field="file",
        )


def file_type(filename: str, content_type: str | None = None) -> str | None:
    """The supported type of a file by its extension, else by its declared type, else None."""
    extension = PurePath(filename or "").suffix.lower()
    if extension in TYPES_BY_EXTENSION:
        return TYPES_BY_EXTENSION[extension]
    declared = (content_type or "").split(";")[0].strip().lower()
    return declared if declared in SUPPORTED_TYPES else None


def extract_text(*, data: bytes, filename: str, content_type: str | None = None) -> tuple[str, str]:
    """The text of a file and its type; unsupported or empty files are refused (`file`)."""
    kind = PDF if data.startswith(b"%PDF-") else file_type(filename, content_type)
    if kind is None:
        raise InvalidInput(
            f"{filename or 'the file'} is not a supported type: upload text (.txt), "
            "Markdown (.md), HTML (.html) or PDF (.pdf).",
            field="file",
        )
    if kind == PDF:
        try:
            _, text = pdf_text(data)
        except UnreadableFile as error:
            raise InvalidInput(
                f"{filename} is not a readable PDF ({error}).", field="file"
            ) from None
    elif kind == HTML:
        _, text = html_text(data, charset=declared_charset(data), fragment_as_is=True)
    else:
        text = decode(data)
    text = normalise_text(text)
    if not text:
        raise InvalidInput(f"{filename or 'the file'} has no text to search.", field="file")
    return text, kind


def _store(*, dataset_id: int, title: str, text: str, sha256: str, **fields) -> Document:
    document = Document.objects.create(
        dataset_id=dataset_id, title=title[:_TITLE_MAX], text=text, sha256=sha256, **fields
    )
    Chunk.objects.bulk_create(
        Chunk(document=document, dataset_id=dataset_id, position=position, text=piece)
        for position, piece in enumerate(chunk_text(text))
    )
    return document


@transaction.atomic
def document_add(
    *,
    dataset: Dataset,
    title: str,
    data: bytes,
    filename: str,
    content_type: str | None = None,
    source: str = "",
    title_given: bool = True,
    copies: bool = False,
) -> Document:
    """Add a file (text, Markdown, HTML or PDF) to a dataset: its text, hash and chunks.
    `title`, when there is one, is the one a person gave it (`title_given`), which every
    page shows as given; the loaders that make one of a file's name say it is not. A file
    the dataset already holds is refused, unless `copies` (the starter dataset, whose pydoc
    topics share some texts)."""
    file_size_check(size=len(data), filename=filename)
    sha256 = hashlib.sha256(data).hexdigest()
    if not copies:
        _refuse_a_copy(dataset, sha256, filename)
    text, kind = extract_text(data=data, filename=filename, content_type=content_type)
    given = strip_controls(title or "").strip()
    given = given if visible(given) else ""  # a title of zero-width spaces names nothing
    title = given or PurePath(filename or "").stem or "untitled"
    return _store(
        dataset_id=dataset.pk,
        title=title,
        title_given=bool(given) and title_given,
        text=text,
        sha256=sha256,
        content_type=kind,
        source=(source or filename or "")[:_SOURCE_MAX],
    )


def _refuse_a_copy(dataset: Dataset, sha256: str, filename: str) -> None:
    """The same file twice made two documents, each passage found and cited twice (load_dataset
    skips it; the upload refuses it, naming the document it already is)."""
    copy = dataset.documents.filter(sha256=sha256).order_by("pk").first()
    if copy is not None:
        name = document_headings(Document.objects.filter(pk=copy.pk))[copy.pk]
        raise Conflict(
            f'{filename or "this file"} is already in this knowledge base, as "{name}" '
            f"(document {copy.pk})."
        )


def document_delete(*, document: Document) -> None:
    """Delete a document with its chunks; runs that cited it keep their sources (the passage
    page of a deleted document is a 404)."""
    document.delete()


# --- Facts -----------------------------------------------------------------------------------


def _fact_title(fact: str) -> str:
    line = " ".join(fact.split())
    return line if len(line) <= 120 else line[:119].rstrip() + "…"


@transaction.atomic
def fact_remember(*, run_id: int, fact: str, source: str = "") -> Document:
    """Store a fact an agent learnt as a document of its run's dataset, so every agent that
    queries the dataset (its siblings first) finds it, with the agent that remembered it."""
    run = Run.objects.only("pk", "dataset_id").get(pk=run_id)
    if run.dataset_id is None:
        raise InvalidInput("this research has no dataset to remember facts in.", field="dataset")
    fact = normalise_text(fact or "")
    if not fact:
        raise InvalidInput("fact must not be empty.", field="fact")
    if len(fact) > FACT_MAX_CHARS:
        raise InvalidInput(
            f"fact is {len(fact)} characters long; the limit is {FACT_MAX_CHARS}.", field="fact"
        )
    return _store(
        dataset_id=run.dataset_id,
        title=_fact_title(fact),
        text=fact,
        sha256=hashlib.sha256(fact.encode()).hexdigest(),
        content_type=TEXT,
        source=(source or "").strip()[:_SOURCE_MAX],
        remembered_by_id=run.pk,
    )
