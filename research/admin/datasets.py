"""The admin of the knowledge base: datasets, documents (uploaded through the datasets
service, as the API adds them), chunks, sources and citations."""

from django import forms
from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from research import services
from research.admin.base import ReadOnlyAdmin, changelist_url, excerpt_of
from research.errors import ResearchError
from research.models import (
    Chunk,
    Citation,
    Dataset,
    Document,
    Source,
)


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "owner", "documents", "created_at"]
    list_select_related = ["owner"]
    raw_id_fields = ["owner"]
    search_fields = ["name", "description"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Dataset]:
        return super().get_queryset(request).annotate(document_count=Count("documents"))

    @admin.display(description="documents", ordering="document_count")
    def documents(self, dataset: Dataset) -> int:
        return dataset.document_count


class DocumentUploadForm(forms.ModelForm):
    """A file for a dataset, added by datasets.document_add as the API adds it (extraction,
    sha256, chunks); what the service refuses shows on the form, on its field."""

    title = forms.CharField(
        required=False, max_length=500, help_text="Left empty: the file's name."
    )
    file = forms.FileField(help_text="A text, Markdown, HTML or PDF file.")

    class Meta:
        model = Document
        fields = ["dataset", "title"]

    def clean(self) -> dict:
        data = super().clean()
        upload, dataset = data.get("file"), data.get("dataset")
        if upload is None or dataset is None:
            return data
        # The service is the check: only it knows which files it can read. The admin's add
        # view runs in a transaction, so a page that fails after this adds nothing.
        try:
            services.file_size_check(size=upload.size, filename=upload.name or "")
            self.document = services.document_add(
                dataset=dataset,
                title=data.get("title", ""),
                data=upload.read(),
                filename=upload.name or "",
                content_type=upload.content_type,
            )
        except ResearchError as error:  # a file it cannot read, or one already there
            field = error.field if error.field in self.fields else "file"
            self.add_error(field, error.message)
        return data


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "title",
        "dataset",
        "content_type",
        "chunks",
        "remembered_by",
        "created_at",
    ]
    list_filter = ["content_type"]
    list_select_related = ["dataset", "remembered_by"]
    raw_id_fields = ["dataset", "remembered_by"]
    search_fields = ["title", "source"]
    # The chunks and their search index are derived from the text when the document is
    # added: edits here would leave them stale, so text and dataset are fixed once added.
    readonly_fields = ["dataset", "text", "sha256", "remembered_by", "chunks", "created_at"]
    add_fields = ["dataset", "title", "file"]

    def get_fields(self, request: HttpRequest, obj: Document | None = None) -> list[str]:
        return self.add_fields if obj is None else super().get_fields(request, obj)

    def get_readonly_fields(self, request: HttpRequest, obj: Document | None = None) -> list:
        return [] if obj is None else super().get_readonly_fields(request, obj)

    def get_form(self, request: HttpRequest, obj: Document | None = None, **kwargs):
        if obj is None:
            kwargs["form"] = DocumentUploadForm
        return super().get_form(request, obj, **kwargs)

    def save_form(self, request: HttpRequest, form: forms.ModelForm, change: bool) -> Document:
        if change:
            return super().save_form(request, form, change)
        return form.document  # already stored, with its chunks, by the form's clean()

    def save_model(self, request: HttpRequest, obj: Document, form, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form, formsets, change: bool) -> None:
        if change:
            super().save_related(request, form, formsets, change)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Document]:
        return super().get_queryset(request).annotate(chunk_count=Count("chunks"))

    @admin.display(description="chunks", ordering="chunk_count")
    def chunks(self, document: Document) -> str:
        return format_html(
            '<a href="{}">{}</a>',
            changelist_url(Chunk, document__id__exact=document.pk),
            document.chunk_count,
        )


@admin.register(Chunk)
class ChunkAdmin(ReadOnlyAdmin):
    list_display = ["id", "document", "position", "excerpt"]
    list_select_related = ["document"]
    raw_id_fields = ["document", "dataset"]
    search_fields = ["text"]
    excerpt = excerpt_of("text")


@admin.register(Source)
class SourceAdmin(ReadOnlyAdmin):
    list_display = ["id", "kind", "title", "url", "run", "root", "fetched_at"]
    list_filter = ["kind"]
    list_select_related = ["run", "root"]
    raw_id_fields = ["run", "root"]
    search_fields = ["url", "final_url", "title"]


@admin.register(Citation)
class CitationAdmin(ReadOnlyAdmin):
    list_display = ["id", "url", "title", "verified", "run", "source"]
    list_filter = ["verified"]
    list_select_related = ["run", "source"]
    raw_id_fields = ["run", "source"]
    search_fields = ["url", "title"]
