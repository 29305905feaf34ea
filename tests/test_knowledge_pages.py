"""The knowledge-base pages: create a knowledge base, list its documents with their passages,
delete one with its passages, start a research on it; the API's document endpoint; and every
surface a 404 for another user. Uploads from the page go through the API (tests/test_knowledge.py
covers its words; tests/test_browser_knowledge.py the page in Chromium)."""

import pytest
from django.urls import reverse

from frontend.passages import readable, search_snippet
from research.fulltext import question_words
from research.models import Chunk, Dataset, Document
from research.services.datasets import dataset_create, document_add

pytestmark = pytest.mark.django_db

TEXT = b"Kestrels hover over motorway verges, watching for voles in the grass."


@pytest.fixture
def birds(alice) -> Dataset:
    dataset = dataset_create(owner=alice, name="Birds", description="Field notes")
    document_add(dataset=dataset, title="", data=TEXT, filename="kestrels.txt")
    return dataset


def test_creating_a_knowledge_base_opens_its_page(client, alice):
    client.force_login(alice)
    response = client.post(reverse("knowledge-bases"), {"name": " Rivers ", "description": ""})
    dataset = Dataset.objects.get(owner=alice)
    assert dataset.name == "Rivers"
    assert response.status_code == 302
    assert response["Location"] == reverse("knowledge-base", args=[dataset.pk])
    page = client.get(response["Location"]).content.decode()
    assert '<h1 id="kb-name" class="kb-name">Rivers</h1>' in page
    assert "No documents yet." in page
    assert f'data-upload-url="/v1/gb/datasets/{dataset.pk}/documents"' in page
    assert 'accept=".txt,.text,.md,.markdown,.html,.htm,.pdf"' in page
    assert "PDF, HTML, Markdown or text files, up to 25 MB each." in page


def test_an_empty_or_taken_name_is_refused_in_the_services_words(client, alice, birds):
    client.force_login(alice)
    empty = client.post(reverse("knowledge-bases"), {"name": "  "})
    assert empty.status_code == 200
    assert "Name must not be empty." in empty.content.decode()
    taken = client.post(reverse("knowledge-bases"), {"name": "Birds"})
    assert "You already have a knowledge base named &#x27;Birds&#x27;." in taken.content.decode()
    assert Dataset.objects.filter(owner=alice).count() == 1


def test_the_list_and_the_page_show_each_document_and_its_passages(client, alice, birds):
    client.force_login(alice)
    listing = client.get(reverse("knowledge-bases")).content.decode()
    assert 'aria-current="page">Knowledge bases</a>' in listing
    assert reverse("knowledge-base", args=[birds.pk]) in listing
    assert "Field notes" in listing

    document = Document.objects.get(dataset=birds)
    for url in (
        reverse("knowledge-base", args=[birds.pk]),
        reverse("knowledge-documents", args=[birds.pk]),
    ):
        page = client.get(url).content.decode()
        assert f'<tr data-document-id="{document.pk}">' in page
        assert reverse("passage", args=[birds.pk, document.pk, 0]) in page
        assert (
            '<td class="num" data-passages>1<span class="phone-only"> passage</span></td>' in page
        )
        assert ">ready<" in page


def test_deleting_a_document_removes_its_passages_and_says_so(client, alice, birds):
    client.force_login(alice)
    document = Document.objects.get(dataset=birds)
    url = reverse("knowledge-document-delete", args=[birds.pk, document.pk])
    assert client.get(url).status_code == 405
    response = client.post(url, follow=True)
    assert "Deleted kestrels and its passages." in response.content.decode()
    assert not Document.objects.filter(pk=document.pk).exists()
    assert not Chunk.objects.filter(document_id=document.pk).exists()
    assert Dataset.objects.filter(pk=birds.pk).exists()


def test_bob_gets_a_404_on_every_surface_of_alices_knowledge_base(client, api_for, bob, birds):
    document = Document.objects.get(dataset=birds)
    client.force_login(bob)
    for url in (
        reverse("knowledge-base", args=[birds.pk]),
        reverse("knowledge-documents", args=[birds.pk]),
        reverse("passage", args=[birds.pk, document.pk, 0]),
    ):
        assert client.get(url).status_code == 404, url
    delete = reverse("knowledge-document-delete", args=[birds.pk, document.pk])
    assert client.post(delete).status_code == 404
    assert client.post(reverse("knowledge-delete", args=[birds.pk])).status_code == 404
    assert "Birds" not in client.get(reverse("knowledge-bases")).content.decode()
    api = api_for(bob)
    one = reverse("api:dataset-document", args=[birds.pk, document.pk])
    assert api.get(one).status_code == 404
    assert api.delete(one).status_code == 404
    assert Document.objects.filter(pk=document.pk).exists()
    assert Dataset.objects.filter(pk=birds.pk).exists()


def test_the_api_reads_and_deletes_one_document(api, birds):
    document = Document.objects.get(dataset=birds)
    url = reverse("api:dataset-document", args=[birds.pk, document.pk])
    body = api.get(url).json()
    assert (body["id"], body["title"], body["chunk_count"]) == (document.pk, "kestrels", 1)
    assert api.delete(url).status_code == 204
    assert api.get(url).status_code == 404
    assert api.get(url).json() == {"detail": f"no document with id {document.pk} in this dataset."}


def test_start_a_research_on_it_chooses_it_on_the_form(client, alice, bob, birds):
    bobs = dataset_create(owner=bob, name="Bob's")
    client.force_login(alice)
    page = client.get(reverse("knowledge-base", args=[birds.pk])).content.decode()
    start = f"{reverse('runs')}?dataset={birds.pk}"
    assert f'href="{start}"' in page
    form = client.get(start).content.decode()
    assert f'<option value="{birds.pk}" selected>Birds</option>' in form
    # Another user's id chooses nothing of theirs: the form's own default stands.
    other = client.get(f"{reverse('runs')}?dataset={bobs.pk}").content.decode()
    assert "Bob&#x27;s" not in other
    assert f'<option value="{birds.pk}" selected>' not in other


def test_a_file_over_the_limit_is_refused_before_it_is_sent_in_the_uploads_words(
    client, alice, bob, birds
):
    from research.services.datasets import MAX_FILE_BYTES

    url = reverse("knowledge-upload-check", args=[birds.pk])
    client.force_login(alice)
    big = client.post(url, {"name": "huge.txt", "size": str(MAX_FILE_BYTES + 1)})
    assert big.status_code == 400
    assert big.json() == {
        "file": [f"huge.txt is {MAX_FILE_BYTES + 1:,} bytes; the limit is {MAX_FILE_BYTES:,}."]
    }
    assert client.post(url, {"name": "ok.txt", "size": str(MAX_FILE_BYTES)}).status_code == 204
    bad = client.post(url, {"name": "x.txt", "size": "lots"})
    assert bad.json() == {"size": ["size must be a whole number of bytes."]}
    client.force_login(bob)
    assert client.post(url, {"name": "huge.txt", "size": "1"}).status_code == 404


def test_a_search_snippet_marks_the_words_looked_for_around_the_first_one():
    """Escaped; its common words ("is", "a") left unmarked, the snippet placed around the
    words that matter; a long unbroken path before them does not push them out of it."""
    question = question_words("What is a <context> manager?")
    snippet = search_snippet("A <b>context</b> manager is an object.", question)
    assert snippet == (
        "A &lt;b&gt;<mark class='quoted'>context</mark>&lt;/b&gt; "
        "<mark class='quoted'>manager</mark> is an object."
    )
    path = "see " + "a/" * 60 + "exceptions and then a context manager"
    assert search_snippet(path, question) == (
        "…and then a <mark class='quoted'>context</mark> <mark class='quoted'>manager</mark>"
    )


def test_a_passage_reads_its_headings_as_words_and_keeps_its_codes_comments():
    text = "# Install\n\n```sh\n# as root\npip install canopy\n```\n## Use\nRun it."
    assert readable(text) == "Install\n\n```sh\n# as root\npip install canopy\n```\nUse\nRun it."
