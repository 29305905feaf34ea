"""Knowledge-base pages: the user's knowledge bases, and one of them with its documents.

Files are uploaded from the page through the REST API (`POST /v1/gb/datasets/<id>/documents`,
one request per file), so each file has its own progress and its own error in the API's
words, with the API's limits and types (research.services.datasets). Creating a knowledge
base and deleting a document are forms posted here, calling the same services. Every query
is scoped to the signed-in user: another user's knowledge base is a 404.
"""

from dataclasses import dataclass

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from frontend.passages import search_snippet
from frontend.rendering import sentence
from research import selectors, services
from research.errors import Conflict, InvalidInput, NotFound
from research.fulltext import (
    QUESTION_MAX,
    document_heading,
    document_headings,
    passage_name,
    question_words,
    search_chunks,
)
from research.models import Dataset, Document
from research.services.datasets import HTML, MARKDOWN, MAX_FILE_BYTES, PDF, TYPES_BY_EXTENSION

# How a stored type reads in the documents list.
TYPE_WORDS = {PDF: "PDF", HTML: "HTML", MARKDOWN: "Markdown"}


def upload_limits_text() -> str:
    """What the drop zone says it takes: the service's types and size limit."""
    return f"PDF, HTML, Markdown or text files, up to {MAX_FILE_BYTES // (1024 * 1024)} MB each."


class KnowledgeBaseForm(forms.Form):
    # Shape only: emptiness, length and uniqueness are the service's, in the API's words.
    name = forms.CharField(label="Name", required=False, strip=False)
    description = forms.CharField(
        label="What it holds",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Optional: a line for you, shown in the list.",
    )


def _dataset_or_404(request: HttpRequest, dataset_id: int) -> Dataset:
    try:
        return selectors.dataset_get(owner=request.user, dataset_id=dataset_id)
    except NotFound as error:
        raise Http404(error.message) from None


@login_required
@require_http_methods(["GET", "POST"])
def knowledge_bases(request: HttpRequest) -> HttpResponse:
    """The user's knowledge bases and the form that creates one."""
    form = KnowledgeBaseForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            dataset = services.dataset_create(
                owner=request.user,
                name=form.cleaned_data["name"],
                description=form.cleaned_data["description"],
            )
        except InvalidInput as error:
            field = error.field if error.field in form.fields else None
            form.add_error(field, sentence(error.message, field))
        else:
            return redirect("knowledge-base", dataset_id=dataset.pk)
    datasets = selectors.dataset_list(owner=request.user)
    return render(request, "knowledge_bases.html", {"form": form, "datasets": datasets})


@dataclass(frozen=True)
class DocumentRow:
    """A document as the list shows it."""

    document: Document
    title: str  # its title as its passages' pages and the reports show it (document_heading)
    kind: str  # its type in words, or "fact" for one an agent remembered
    passages: int
    first_passage: str  # the page of its first passage ("" when it has none)


def document_rows(dataset: Dataset) -> list[DocumentRow]:
    rows = []
    # The start of each text, for its heading, in the list's own query.
    for document in selectors.document_list(dataset=dataset):
        passages = document.chunk_count
        kind = "fact" if document.remembered_by_id else TYPE_WORDS.get(document.content_type)
        first = reverse("passage", args=[dataset.pk, document.pk, 0]) if passages else ""
        title = document_heading(document.title, document.head, given=document.title_given)
        rows.append(DocumentRow(document, title, kind or "text", passages, first))
    return rows


SEARCH_RESULTS = 10


@dataclass(frozen=True)
class Found:
    """A passage a search of the page found, as its results list shows it."""

    name: str  # "Tidal bores, passage 3"
    href: str
    snippet: str


def search_results(dataset: Dataset, question: str) -> list[Found]:
    """What the page's search finds: the passages the agents' query tool would (the same
    full-text search, best first), named and linked as a report's sources are."""
    hits = search_chunks(dataset_id=dataset.pk, question=question, limit=SEARCH_RESULTS)
    words = question_words(question)
    return [
        Found(
            name=passage_name(hit.document_title, hit.position),
            href=reverse("passage", args=[dataset.pk, hit.document_id, hit.position]),
            snippet=search_snippet(hit.text, words),
        )
        for hit in hits
    ]


def _documents_context(dataset: Dataset) -> dict:
    return {"dataset": dataset, "rows": document_rows(dataset)}


@login_required
@require_GET
def knowledge_base(request: HttpRequest, dataset_id: int) -> HttpResponse:
    """One knowledge base: a search of its passages (`q`), the upload zone, its documents, and
    a research to start on it."""
    dataset = _dataset_or_404(request, dataset_id)
    question = " ".join(request.GET.get("q", "").split())[:QUESTION_MAX]
    context = {
        **_documents_context(dataset),
        "asked": question,  # not "question": the delete box's words take that name
        "found": search_results(dataset, question) if question else None,
        "question_max": QUESTION_MAX,
        "accept": ",".join(TYPES_BY_EXTENSION),
        "limits": upload_limits_text(),
        "upload_url": reverse("api:dataset-documents", args=[dataset.pk]),
        "check_url": reverse("knowledge-upload-check", args=[dataset.pk]),
        "max_bytes": MAX_FILE_BYTES,
        "documents_url": reverse("knowledge-documents", args=[dataset.pk]),
        "start_url": f"{reverse('runs')}?dataset={dataset.pk}",
    }
    return render(request, "knowledge_base.html", context)


@login_required
@require_GET
def knowledge_documents(request: HttpRequest, dataset_id: int) -> HttpResponse:
    """The documents list alone (HTML), which the page reads again after an upload."""
    dataset = _dataset_or_404(request, dataset_id)
    return render(request, "knowledge_documents.html", _documents_context(dataset))


@login_required
@require_POST
def upload_check(request: HttpRequest, dataset_id: int) -> HttpResponse:
    """Whether a file of this name and size may be uploaded, asked before sending one over
    the limit, so that it is refused in the upload's own words without sending its bytes:
    204, or 400 with `{"file": [why]}` as the API says it."""
    _dataset_or_404(request, dataset_id)
    name, size = request.POST.get("name", ""), request.POST.get("size", "")
    if not size.isdigit():
        return JsonResponse({"size": ["size must be a whole number of bytes."]}, status=400)
    try:
        services.file_size_check(size=int(size), filename=name)
    except InvalidInput as error:
        return JsonResponse({error.field: [error.message]}, status=400)
    return HttpResponse(status=204)


@login_required
@require_POST
def document_delete(request: HttpRequest, dataset_id: int, document_id: int) -> HttpResponse:
    dataset = _dataset_or_404(request, dataset_id)
    try:
        document = selectors.document_get(dataset=dataset, document_id=document_id)
    except NotFound as error:
        raise Http404(error.message) from None
    title = document_headings(Document.objects.filter(pk=document.pk))[document.pk]
    services.document_delete(document=document)
    messages.success(request, f"Deleted {title} and its passages.")
    return redirect("knowledge-base", dataset_id=dataset.pk)


@login_required
@require_POST
def knowledge_base_delete(request: HttpRequest, dataset_id: int) -> HttpResponse:
    """The knowledge base with its documents and passages; researches that cited it keep
    their sources (services.dataset_delete)."""
    dataset = _dataset_or_404(request, dataset_id)
    documents = dataset.documents.count()
    try:
        services.dataset_delete(dataset=dataset)
    except Conflict as refused:
        messages.error(request, refused.message[0].upper() + refused.message[1:])
        return redirect("knowledge-base", dataset_id=dataset.pk)
    noun = "document" if documents == 1 else "documents"
    messages.success(request, f"Deleted {dataset.name} and its {documents} {noun}.")
    return redirect("knowledge-bases")


def start_initial(request: HttpRequest) -> dict:
    """The start form's initial knowledge base, from `?dataset=<id>` (the knowledge-base page's
    "Start a research" link): only one of the user's own, else the form's default."""
    wanted = request.GET.get("dataset", "")
    if not wanted.isdigit():
        return {}
    owned = Dataset.objects.filter(owner=request.user, pk=int(wanted)).exists()
    return {"dataset": wanted} if owned else {}
