"""The REST API under /v1/gb/datasets: the knowledge bases research runs query.

Same flow as research.api: authenticate → permit → check input → service (scoped to the
owner: another user's dataset is a 404) → output serializer. Its exception_handler turns
InvalidInput into a 400 naming the field and NotFound into a 404.
"""

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import api_view, throttle_classes
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response

from research import selectors, services
from research.api_helpers import checked, json_or_form
from research.errors import InvalidInput
from research.fulltext import chunk_url, search_chunks
from research.models import Dataset
from research.ops.throttles import KnowledgeQueryThrottle, UploadThrottle
from research.serializers import (
    QUERY_MAX_LIMIT,
    ChunkHitSerializer,
    DatasetCreateSerializer,
    DatasetOutputSerializer,
    DocumentOutputSerializer,
    DocumentUploadSerializer,
    QueryInputSerializer,
    RefusalSerializer,
)


def _dataset(request: Request, dataset_id: int) -> Dataset:
    return selectors.dataset_get(owner=request.user, dataset_id=dataset_id)


def page_of(serializer: type[serializers.Serializer]) -> serializers.Serializer:
    """The schema of a page (PageNumberPagination) of `serializer`'s items."""
    return inline_serializer(
        name=f"{serializer.__name__.removesuffix('Serializer')}Page",
        fields={
            "count": serializers.IntegerField(),
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": serializer(many=True),
        },
    )


PAGE = OpenApiParameter("page", int, description="the page number, from 1")


@extend_schema(methods=["GET"], parameters=[PAGE], responses=page_of(DatasetOutputSerializer))
@extend_schema(
    methods=["POST"],
    request=json_or_form(DatasetCreateSerializer),
    responses={201: DatasetOutputSerializer},
)
@api_view(["GET", "POST"])
def datasets(request: Request) -> Response:
    if request.method == "POST":
        data = checked(DatasetCreateSerializer, request.data)
        dataset = services.dataset_create(
            owner=request.user, name=data["name"], description=data["description"]
        )
        dataset.document_count = 0
        return Response(DatasetOutputSerializer(dataset).data, status=status.HTTP_201_CREATED)
    paginator = PageNumberPagination()
    page = paginator.paginate_queryset(selectors.dataset_list(owner=request.user), request)
    return paginator.get_paginated_response(DatasetOutputSerializer(page, many=True).data)


@extend_schema(methods=["GET"], responses=DatasetOutputSerializer)
@extend_schema(methods=["DELETE"], responses={204: None, 409: RefusalSerializer})
@api_view(["GET", "DELETE"])
def dataset_detail(request: Request, dataset_id: int) -> Response:
    dataset = _dataset(request, dataset_id)
    if request.method == "DELETE":
        services.dataset_delete(dataset=dataset)
        return Response(status=status.HTTP_204_NO_CONTENT)
    return Response(DatasetOutputSerializer(dataset).data)


@extend_schema(methods=["GET"], parameters=[PAGE], responses=page_of(DocumentOutputSerializer))
@extend_schema(
    methods=["POST"],
    request={"multipart/form-data": DocumentUploadSerializer},
    responses={201: DocumentOutputSerializer, 409: RefusalSerializer},
)
@api_view(["GET", "POST"])
@throttle_classes([UploadThrottle])
def dataset_documents(request: Request, dataset_id: int) -> Response:
    dataset = _dataset(request, dataset_id)
    if request.method == "POST":
        return document_upload(request, dataset)
    paginator = PageNumberPagination()
    page = paginator.paginate_queryset(selectors.document_list(dataset=dataset), request)
    return paginator.get_paginated_response(DocumentOutputSerializer(page, many=True).data)


@extend_schema(methods=["GET"], responses=DocumentOutputSerializer)
@extend_schema(methods=["DELETE"], responses={204: None})
@api_view(["GET", "DELETE"])
def dataset_document(request: Request, dataset_id: int, document_id: int) -> Response:
    """One document of the dataset; DELETE removes it with its passages."""
    document = selectors.document_get(
        dataset=_dataset(request, dataset_id), document_id=document_id
    )
    if request.method == "DELETE":
        services.document_delete(document=document)
        return Response(status=status.HTTP_204_NO_CONTENT)
    return Response(DocumentOutputSerializer(document).data)


def document_upload(request: Request, dataset: Dataset) -> Response:
    if "file" not in request.FILES:
        raise InvalidInput("upload the document as the multipart field file.", field="file")
    data = checked(DocumentUploadSerializer, request.data)
    upload = data["file"]
    # Refused before reading: a big upload sits in a temporary file until read() copies it
    # all into memory.
    services.file_size_check(size=upload.size, filename=upload.name or "")
    document = services.document_add(
        dataset=dataset,
        title=data["title"],
        data=upload.read(),
        filename=upload.name or "",
        content_type=upload.content_type,
    )
    document.chunk_count = document.chunks.count()
    return Response(DocumentOutputSerializer(document).data, status=status.HTTP_201_CREATED)


@extend_schema(
    parameters=[
        OpenApiParameter("q", str, required=True, description="the question"),
        OpenApiParameter("limit", int, description=f"how many passages (1 to {QUERY_MAX_LIMIT})"),
    ],
    responses=ChunkHitSerializer(many=True),
)
@api_view(["GET"])
@throttle_classes([KnowledgeQueryThrottle])
def dataset_query(request: Request, dataset_id: int) -> Response:
    """The passages of the dataset that best answer `q`: the search the agents' query runs."""
    dataset = _dataset(request, dataset_id)
    data = checked(QueryInputSerializer, request.query_params, also=("format",))
    hits = search_chunks(dataset_id=dataset.pk, question=data["q"], limit=data.get("limit", 5))
    rows = [
        {
            "document_id": hit.document_id,
            "document_title": hit.document_title,
            "position": hit.position,
            "url": chunk_url(
                dataset_id=dataset.pk, document_id=hit.document_id, position=hit.position
            ),
            "text": hit.text,
            "rank": hit.rank,
        }
        for hit in hits
    ]
    return Response(ChunkHitSerializer(rows, many=True).data)
