"""The knowledge base: datasets an analyst fills with documents, cut into chunks that
full-text search ranks (research.fulltext)."""

from django.conf import settings
from django.db import models


class Dataset(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="dataset_unique_name"),
        ]

    def __str__(self) -> str:
        return self.name


class Document(models.Model):
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="documents")
    title = models.CharField(max_length=500)
    # A title a person gave it (an upload's, the API's), shown as given; otherwise the title
    # is a file's stem, and its text's heading names it (research.fulltext.document_heading).
    title_given = models.BooleanField(default=False)
    source = models.CharField(max_length=2000, blank=True, default="")
    content_type = models.CharField(max_length=100, blank=True, default="text/plain")
    text = models.TextField()
    sha256 = models.CharField(max_length=64)
    # Set for facts saved by `remember`: the agent that remembered it.
    remembered_by = models.ForeignKey(
        "research.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.title


class Chunk(models.Model):
    """A piece of a document, ranked by full-text search (see research.fulltext)."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="chunks")
    position = models.PositiveIntegerField()
    text = models.TextField()

    class Meta:
        ordering = ["document_id", "position"]

    def __str__(self) -> str:
        return f"chunk {self.position} of document {self.document_id}"
