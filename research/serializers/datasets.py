"""The knowledge base's API shapes: datasets, documents, uploads and query hits."""

from rest_framework import serializers

from research.fulltext import HEAD_CHARS, QUESTION_MAX, document_heading
from research.models import Dataset, Document

QUERY_MAX_LIMIT = 20


class DatasetOutputSerializer(serializers.ModelSerializer):
    document_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Dataset
        fields = ["id", "name", "description", "document_count", "created_at"]
        read_only_fields = fields


class DatasetCreateSerializer(serializers.Serializer):
    # Emptiness and uniqueness are checked by the service, so the CLI says the same.
    name = serializers.CharField(allow_blank=True, trim_whitespace=False)
    description = serializers.CharField(required=False, allow_blank=True, default="")


class DocumentOutputSerializer(serializers.ModelSerializer):
    title = serializers.SerializerMethodField(
        help_text="its name as every page, report and search names it: the title given at "
        "upload, else the heading its text opens with, else its file's name"
    )
    dataset_id = serializers.IntegerField(read_only=True)
    remembered_by_id = serializers.IntegerField(read_only=True, allow_null=True)
    chunk_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Document
        fields = [
            "id",
            "dataset_id",
            "title",
            "source",
            "content_type",
            "sha256",
            "remembered_by_id",
            "chunk_count",
            "created_at",
        ]
        read_only_fields = fields

    def get_title(self, document: Document) -> str:
        head = getattr(document, "head", None)  # the selectors' reads annotate it
        if head is None:
            head = document.text[:HEAD_CHARS]  # a document just uploaded: its text is here
        return document_heading(document.title, head, given=document.title_given)


class DocumentUploadSerializer(serializers.Serializer):
    # An empty file is refused by the service, in the words load_dataset and the page use.
    file = serializers.FileField(
        allow_empty_file=True, help_text="A text, Markdown, HTML or PDF file."
    )
    title = serializers.CharField(required=False, allow_blank=True, default="")


class QueryInputSerializer(serializers.Serializer):
    q = serializers.CharField(max_length=QUESTION_MAX, help_text="The question.")
    limit = serializers.IntegerField(required=False, min_value=1, max_value=QUERY_MAX_LIMIT)


class ChunkHitSerializer(serializers.Serializer):
    document_id = serializers.IntegerField()
    document_title = serializers.CharField()
    position = serializers.IntegerField()
    url = serializers.CharField(help_text="The kb:// address an agent cites.")
    text = serializers.CharField()
    rank = serializers.FloatField()
