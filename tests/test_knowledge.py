"""The knowledge base: chunking, uploads through the API, search on PostgreSQL and SQLite,
owner scoping, and the query/remember tools shared by sibling agents."""

import re
import threading

import pytest
from django.db import connection, transaction
from django.urls import reverse
from rest_framework.test import APIClient

from agents.runtime.context import AgentContext, CancelToken
from agents.tools.base import ToolError
from agents.tools.knowledge import QUERY, REMEMBER
from research import services
from research.fulltext import chunk_text, search_chunks
from research.models import Chunk, Dataset, Document, Run, Source
from research.services import datasets
from research.services.datasets import dataset_create, document_add
from tests.conftest import statements_waiting_on_a_lock, wait_for
from tests.helpers import on_fresh_sqlite


def make_pdf(*lines: str) -> bytes:
    """A real one-page PDF (Helvetica text), written by hand: no PDF writer needed."""
    escaped = [re.sub(r"([\\()])", r"\\\1", line) for line in lines]
    text_ops = " ".join(f"({line}) Tj T*" for line in escaped)
    stream = f"BT /F1 12 Tf 14 TL 72 720 Td {text_ops} ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
    ]
    pdf, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(pdf))
        pdf += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(pdf)
    pdf += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    pdf += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    pdf += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return pdf


PDF_LINES = (
    "Quarterly report of the Zephyrine turbine programme.",
    "The turbines reached an efficiency of 47 percent in March.",
)
MARKDOWN = b"""# Lighthouse keeping

Keepers of the **Skerryvore** lighthouse trimmed the paraffin wicks every four hours.

## Rations

Oatmeal and salted herring arrived by boat each fortnight.
"""


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def upload(client: APIClient, dataset_id: int, name: str, data: bytes, **extra):
    from django.core.files.uploadedfile import SimpleUploadedFile

    file = SimpleUploadedFile(name, data, content_type=extra.pop("content_type", "text/plain"))
    url = reverse("api:dataset-documents", args=[dataset_id])
    return client.post(url, {"file": file, **extra}, format="multipart")


def query(client: APIClient, dataset_id: int, question: str):
    return client.get(reverse("api:dataset-query", args=[dataset_id]), {"q": question})


# --- Chunking --------------------------------------------------------------------------------


def test_long_text_is_cut_into_overlapping_chunks_at_sentence_ends():
    sentences = [f"Sentence number {n} tells fact {n} about the archive." for n in range(200)]
    text = " ".join(sentences[:100]) + "\n\n" + " ".join(sentences[100:])
    chunks = chunk_text(text)

    assert len(chunks) > 5
    assert all(len(chunk) <= 1200 for chunk in chunks)
    assert all(chunk.endswith(".") for chunk in chunks), "cut inside a sentence"
    for sentence in sentences:  # nothing lost
        assert any(sentence in chunk for chunk in chunks), sentence
    for first, second in zip(chunks, chunks[1:], strict=False):
        overlap = first[-400:]
        assert second[:150] in overlap, "the next chunk does not repeat the end of the previous"


def test_short_text_is_one_chunk_and_blank_text_none():
    assert chunk_text("  One short note.\r\n\r\n\r\n\r\nAnd another.  ") == [
        "One short note.\n\nAnd another."
    ]
    assert chunk_text(" \n\n ") == []


def test_a_word_longer_than_a_chunk_is_cut_and_kept_whole():
    text = "x" * 3000
    chunks = chunk_text(text)
    assert all(len(chunk) <= 1200 for chunk in chunks)
    assert "".join(chunks).count("x") >= 3000


# --- The API ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_uploaded_pdf_and_markdown_are_found_by_query(alice):
    client = client_for(alice)
    created = client.post(reverse("api:datasets"), {"name": "Archive", "description": "misc"})
    assert created.status_code == 201, created.content
    dataset_id = created.json()["id"]

    pdf = upload(client, dataset_id, "report.pdf", make_pdf(*PDF_LINES), content_type="")
    assert pdf.status_code == 201, pdf.content
    assert pdf.json()["content_type"] == "application/pdf"
    assert pdf.json()["title"] == "report"
    markdown = upload(client, dataset_id, "keepers.md", MARKDOWN, title="Keepers")
    assert markdown.status_code == 201, markdown.content
    assert markdown.json()["chunk_count"] == 1

    found = query(client, dataset_id, "What efficiency did the Zephyrine turbines reach?")
    assert found.status_code == 200
    best = found.json()[0]
    assert best["document_title"] == "report"
    assert "47 percent" in best["text"]
    assert best["url"] == f"kb://dataset/{dataset_id}/document/{pdf.json()['id']}#0"

    found = query(client, dataset_id, "how often were the wicks trimmed at Skerryvore?")
    # Named as its pages name it: by the title its uploader gave it, not by the heading its
    # text opens with ("Lighthouse keeping"), which names a document given none (below).
    assert [hit["document_title"] for hit in found.json()] == ["Keepers"]
    assert "every four hours" in found.json()[0]["text"]

    detail = client.get(reverse("api:dataset-detail", args=[dataset_id])).json()
    assert detail["document_count"] == 2
    listed = client.get(reverse("api:dataset-documents", args=[dataset_id])).json()
    assert [doc["title"] for doc in listed["results"]] == ["report", "Keepers"]


@pytest.mark.django_db
def test_html_upload_keeps_the_text_of_the_page(alice):
    dataset = dataset_create(owner=alice, name="Pages")
    page = (
        b"<html><head><title>Bees</title><style>p{color:red}</style></head><body>"
        b"<nav>Home | About</nav><article><h1>Bees</h1><p>A honeybee colony keeps its hive "
        b"at thirty-five degrees Celsius by fanning its wings.</p></article></body></html>"
    )
    response = upload(client_for(alice), dataset.pk, "bees.html", page, content_type="text/html")
    assert response.status_code == 201, response.content
    document = Document.objects.get(pk=response.json()["id"])
    assert "thirty-five degrees" in document.text
    assert "color:red" not in document.text
    assert search_chunks(dataset_id=dataset.pk, question="hive temperature degrees")


@pytest.mark.django_db
def test_unsupported_or_missing_file_is_refused_naming_the_file_field(alice):
    dataset = dataset_create(owner=alice, name="Pictures")
    client = client_for(alice)
    image = upload(client, dataset.pk, "cat.png", b"\x89PNG\r\n", content_type="image/png")
    assert image.status_code == 400
    assert "cat.png is not a supported type" in image.json()["file"][0]
    broken = upload(client, dataset.pk, "broken.pdf", b"%PDF-1.4 nothing else")
    assert broken.status_code == 400
    assert "broken.pdf" in broken.json()["file"][0]
    missing = client.post(reverse("api:dataset-documents", args=[dataset.pk]), {"title": "x"})
    assert missing.status_code == 400
    assert "file" in missing.json()
    assert Document.objects.count() == 0


@pytest.mark.django_db
def test_dataset_names_are_checked(alice):
    client = client_for(alice)
    assert client.post(reverse("api:datasets"), {"name": "Notes"}).status_code == 201
    again = client.post(reverse("api:datasets"), {"name": "Notes"})
    assert again.status_code == 400
    assert "already have a knowledge base named 'Notes'" in again.json()["name"][0]
    blank = client.post(reverse("api:datasets"), {"name": "  "})
    assert blank.json() == {"name": ["name must not be empty."]}
    dataset_id = client.get(reverse("api:datasets")).json()["results"][0]["id"]
    empty_query = client.get(reverse("api:dataset-query", args=[dataset_id]), {"q": ""})
    assert empty_query.status_code == 400
    assert "q" in empty_query.json()


def _in_thread(target, results: dict, key: str) -> threading.Thread:
    def run() -> None:
        try:
            results[key] = target()
        except Exception as error:  # the test reads it: a 500 raises in the test client
            results[key] = error
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_a_dataset_name_created_by_two_requests_at_once_is_refused_not_a_500(alice):
    inserted, release, results = threading.Event(), threading.Event(), {}

    def first() -> Dataset:
        # The other request's transaction: its row is written, not yet committed.
        with transaction.atomic():
            dataset = dataset_create(owner=alice, name="Notes")
            inserted.set()
            release.wait(10)
        return dataset

    first_thread = _in_thread(first, results, "first")
    assert inserted.wait(10)
    second = _in_thread(
        lambda: client_for(alice).post(reverse("api:datasets"), {"name": "Notes"}),
        results,
        "second",
    )
    # The second has passed the name check (the first row is not visible to it) and waits
    # on the unique index for the first to commit.
    wait_for(statements_waiting_on_a_lock, timeout=10, message="the second insert never waited")
    release.set()
    first_thread.join(10)
    second.join(10)

    assert isinstance(results["first"], Dataset)
    response = results["second"]
    assert not isinstance(response, Exception), response
    assert response.status_code == 400
    assert response.json() == {"name": ["you already have a knowledge base named 'Notes'."]}
    assert Dataset.objects.filter(owner=alice).count() == 1


@pytest.mark.django_db
def test_an_upload_over_the_size_limit_is_refused_naming_the_file_field(alice, monkeypatch):
    monkeypatch.setattr(datasets, "MAX_FILE_BYTES", 10)
    dataset = dataset_create(owner=alice, name="Small")

    response = upload(client_for(alice), dataset.pk, "notes.txt", b"x" * 11)

    assert response.status_code == 400
    assert response.json() == {"file": ["notes.txt is 11 bytes; the limit is 10."]}
    assert Document.objects.count() == 0


@pytest.mark.django_db
def test_bob_cannot_see_query_or_delete_alices_dataset(alice, bob):
    dataset = dataset_create(owner=alice, name="Private")
    document_add(dataset=dataset, title="Secret", data=b"The vault code is 1234.", filename="s.txt")
    bobs = client_for(bob)

    assert bobs.get(reverse("api:datasets")).json()["results"] == []
    for name in ("api:dataset-detail", "api:dataset-documents"):
        assert bobs.get(reverse(name, args=[dataset.pk])).status_code == 404
    assert query(bobs, dataset.pk, "vault code").status_code == 404
    assert upload(bobs, dataset.pk, "x.txt", b"hello").status_code == 404
    assert bobs.delete(reverse("api:dataset-detail", args=[dataset.pk])).status_code == 404

    alices = client_for(alice)
    assert query(alices, dataset.pk, "vault code").json()[0]["document_title"] == "Secret"
    assert alices.delete(reverse("api:dataset-detail", args=[dataset.pk])).status_code == 204
    assert alices.get(reverse("api:dataset-detail", args=[dataset.pk])).status_code == 404
    assert Chunk.objects.count() == 0


@pytest.mark.django_db
def test_a_knowledge_base_a_research_still_searches_is_not_deleted(alice):
    """A research waiting for its analyst's answers lost its knowledge base to a delete and
    went on without it, reporting the query tool's error as its finding: refused (409)."""
    from research import services

    dataset = dataset_create(owner=alice, name="Estuaries")
    document_add(dataset=dataset, title="", data=b"# Bores\n\nA bore is a wave.", filename="b.md")
    waiting = services.run_start(owner=alice, topic="Severn bore", dataset_id=dataset.pk)
    other = services.run_start(owner=alice, topic="Trent aegir", dataset_id=dataset.pk)
    client = client_for(alice)
    url = reverse("api:dataset-detail", args=[dataset.pk])

    refused = client.delete(url)
    assert refused.status_code == 409
    assert refused.json() == {
        "detail": f'knowledge base "Estuaries" is searched by researches {waiting.pk}, '
        f"{other.pk}, which have not ended: cancel them or let them end, then delete the "
        "knowledge base."
    }
    assert Chunk.objects.filter(dataset=dataset).exists()
    services.run_finish(run_id=waiting.pk, report="# Bores")
    services.run_finish(run_id=other.pk, error=services.WORKER_LOST)  # it can be resumed
    resumable = client.delete(url)
    assert resumable.status_code == 409
    assert resumable.json() == {
        "detail": f'knowledge base "Estuaries" is searched by research {other.pk}, which has '
        "been stopped and can still be resumed: resume it and let it end, or delete it, then "
        "delete the knowledge base."
    }
    services.run_delete(run=Run.objects.get(pk=other.pk))
    assert client.delete(url).status_code == 204
    assert Run.objects.get(pk=waiting.pk).dataset_id is None  # its record stays


@pytest.mark.django_db
def test_the_same_file_uploaded_twice_is_refused_naming_the_document_it_is(alice):
    """A second upload of one file made a second document: a research then quoted the
    same passage twice, citing both. load_dataset skipped it; the upload now refuses it."""
    dataset = dataset_create(owner=alice, name="Estuaries")
    client = client_for(alice)
    first = upload(client, dataset.pk, "bores.md", b"# Tidal bores\n\nA bore is a wave.")
    again = upload(client, dataset.pk, "copy.md", b"# Tidal bores\n\nA bore is a wave.")

    assert first.status_code == 201
    assert again.status_code == 409
    assert again.json() == {
        "detail": f'copy.md is already in this knowledge base, as "Tidal bores" '
        f"(document {first.json()['id']})."
    }
    assert dataset.documents.count() == 1
    other = dataset_create(owner=alice, name="Elsewhere")  # another knowledge base may hold it
    assert (
        upload(client, other.pk, "bores.md", b"# Tidal bores\n\nA bore is a wave.").status_code
        == 201
    )


@pytest.mark.django_db
def test_dataset_list_takes_two_queries_whatever_its_length(alice, django_assert_num_queries):
    for number in range(5):
        dataset = dataset_create(owner=alice, name=f"Set {number}")
        document_add(dataset=dataset, title="a", data=b"alpha text", filename="a.txt")
    client = client_for(alice)
    with django_assert_num_queries(2):  # count + page (authentication is forced)
        response = client.get(reverse("api:datasets"))
    assert [item["document_count"] for item in response.json()["results"]] == [1] * 5


# --- Search ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_punctuation_in_a_question_never_breaks_the_search(alice):
    dataset = dataset_create(owner=alice, name="Syntax")
    document_add(dataset=dataset, title="Ops", data=b"Operators: and, or, not.", filename="o.txt")
    for question in ['"unbalanced', "a & b | !c <-> d:*", "(NOT) AND OR NEAR/2 *", "'; --", "?!"]:
        search_chunks(dataset_id=dataset.pk, question=question)  # no error
    assert search_chunks(dataset_id=dataset.pk, question="operators?!")[0].document_title == "Ops"


@pytest.mark.django_db
def test_search_stays_inside_the_dataset(alice):
    first = dataset_create(owner=alice, name="First")
    second = dataset_create(owner=alice, name="Second")
    document_add(dataset=first, title="Owls", data=b"Owls hunt at night.", filename="o.txt")
    assert search_chunks(dataset_id=second.pk, question="owls hunt") == []


@pytest.mark.django_db
def test_postgresql_search_uses_the_gin_index(alice):
    from django.contrib.postgres.search import SearchQuery

    from research.fulltext import EnglishVector

    query_ = SearchQuery("owl | night", search_type="raw", config="english")
    chunks = Chunk.objects.annotate(vector=EnglishVector("text")).filter(vector=query_)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # an empty table: force the choice
        plan = chunks.explain()
    assert "research_chunk_text_fts" in plan


def test_sqlite_search_finds_uploads_and_forgets_deleted_documents(tmp_path):
    """The embedded default: migrate a fresh SQLite file and search it in another process."""
    script = """
import django, json
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth.models import User
from research.fulltext import search_chunks
from research.services.datasets import dataset_create, document_add
from tests.test_knowledge import MARKDOWN, PDF_LINES, make_pdf
owner = User.objects.create_user("alice")
dataset = dataset_create(owner=owner, name="Archive")
pdf = document_add(dataset=dataset, title="", data=make_pdf(*PDF_LINES), filename="report.pdf")
document_add(dataset=dataset, title="", data=MARKDOWN, filename="keepers.md")
def titles(question):
    return [hit.document_title for hit in search_chunks(dataset_id=dataset.pk, question=question)]
result = {
    "turbine": titles("What efficiency did the Zephyrine turbines reach?"),
    "wicks": titles("how often were the wicks trimmed at Skerryvore?"),
    "punctuation": titles('"AND (OR) NOT* NEAR/2 ^turbines -x:'),
}
pdf.delete()
result["after_delete"] = titles("Zephyrine turbines")
from django.db import connection, transaction
with connection.cursor() as cursor:  # fails when the index and research_chunk disagree
    cursor.execute("INSERT INTO chunk_fts(chunk_fts, rank) VALUES ('integrity-check', 1)")
print(json.dumps(result))
"""
    result = on_fresh_sqlite(script, tmp_path / "kb.sqlite3")
    assert result["turbine"][0] == "report"
    assert result["wicks"] == ["Lighthouse keeping"]
    assert result["punctuation"] == ["report"]
    assert result["after_delete"] == []


# --- The tools -------------------------------------------------------------------------------


def context(run) -> AgentContext:
    return AgentContext.load(run.pk, CancelToken(run.pk))


def team(owner, dataset_id):
    root = services.run_start(owner=owner, topic="Lighthouses", dataset_id=dataset_id)
    siblings = [
        services.subagent_create(
            parent_id=root.pk,
            launch=services.Launch(name=name, reason="split", task="keepers", max_steps=5),
        )
        for name in ("alpha", "beta")
    ]
    return root, *siblings


@pytest.mark.django_db
def test_a_fact_remembered_by_one_subagent_is_found_by_its_siblings_query(alice):
    dataset = dataset_create(owner=alice, name="Lighthouses")
    root, alpha, beta = team(alice, dataset.pk)

    said = REMEMBER.handler(
        context(alpha),
        {
            "fact": "The Bell Rock lighthouse was first lit on 1 February 1811.",
            "source": "https://example.org/bell-rock",
        },
    )
    assert "siblings" in said
    answer = QUERY.handler(context(beta), {"question": "When was Bell Rock first lit?"})

    fact = Document.objects.get(remembered_by=alpha)
    url = f"kb://dataset/{dataset.pk}/document/{fact.pk}#0"
    assert "first lit on 1 February 1811" in answer
    assert url in answer
    assert "remembered by alpha; source: https://example.org/bell-rock" in answer
    source = Source.objects.get(run=beta)
    assert (source.kind, source.url, source.root_id) == ("chunk", url, root.pk)


@pytest.mark.django_db
def test_query_returns_titles_and_positions_and_records_each_chunk(alice):
    dataset = dataset_create(owner=alice, name="Ships")
    long_text = " ".join(f"The clipper ship number {n} carried tea from Canton." for n in range(60))
    document = document_add(
        dataset=dataset, title="Clippers", data=long_text.encode(), filename="c.txt"
    )
    root = services.run_start(owner=alice, topic="Ships", dataset_id=dataset.pk)

    answer = QUERY.handler(context(root), {"question": "clipper tea Canton"})

    positions = list(document.chunks.values_list("position", flat=True))
    assert len(positions) > 1
    for position in positions[:5]:
        assert f"Clippers (kb://dataset/{dataset.pk}/document/{document.pk}#{position})" in answer
    assert Source.objects.filter(run=root, kind="chunk").count() == min(len(positions), 5)
    assert QUERY.state == "querying" and REMEMBER.state == "remembering"
    assert QUERY.detail({"question": "clipper tea"}) == "clipper tea"


@pytest.mark.django_db
def test_query_and_remember_without_a_dataset_or_words_are_tool_errors(alice):
    bare = services.run_start(owner=alice, topic="No dataset")
    with pytest.raises(ToolError, match="no dataset"):
        QUERY.handler(context(bare), {"question": "anything"})
    with pytest.raises(ToolError, match="no dataset"):
        REMEMBER.handler(context(bare), {"fact": "a fact"})

    dataset = dataset_create(owner=alice, name="Empty")
    run = services.run_start(owner=alice, topic="With dataset", dataset_id=dataset.pk)
    with pytest.raises(ToolError, match="question must not be empty"):
        QUERY.handler(context(run), {"question": "   "})
    with pytest.raises(ToolError, match="fact must not be empty"):
        REMEMBER.handler(context(run), {"fact": ""})
    assert "No passage of the knowledge base matches" in QUERY.handler(
        context(run), {"question": "zebras"}
    )
