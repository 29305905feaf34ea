"""The load_dataset and load_starter_dataset commands."""

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from research.fulltext import search_chunks
from research.models import Dataset, Document
from tests.test_knowledge import MARKDOWN, PDF_LINES, make_pdf

PROJECT = Path(__file__).resolve().parent.parent
DEMO_QUESTION = "how do Python's context managers and exceptions interact?"


def run_command(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "keepers.md").write_bytes(MARKDOWN)
    (tmp_path / "report.pdf").write_bytes(make_pdf(*PDF_LINES))
    (tmp_path / "guides").mkdir()
    (tmp_path / "guides" / "bees.html").write_text(
        "<html><body><article><p>Bees fan their wings to cool the hive in summer heat."
        "</p></article></body></html>"
    )
    (tmp_path / "guides" / "notes.txt").write_text("Owls hunt at night over the moor.")
    (tmp_path / "photo.png").write_bytes(b"\x89PNG\r\n")  # not a document: left out
    (tmp_path / ".draft.md").write_text("Hidden draft.")  # hidden: left out
    return tmp_path


@pytest.mark.django_db
def test_load_dataset_loads_every_supported_file_and_skips_them_the_second_time(alice, folder):
    output = run_command("load_dataset", str(folder), "--name", "Field notes", "--user", "alice")

    dataset = Dataset.objects.get(owner=alice, name="Field notes")
    assert sorted(dataset.documents.values_list("title", flat=True)) == [
        "guides/bees",
        "guides/notes",
        "keepers",
        "report",
    ]
    assert "loaded  guides/bees.html (1 chunks)" in output
    assert "loaded 4, skipped 0, failed 0" in output
    assert search_chunks(dataset_id=dataset.pk, question="Zephyrine turbines")[
        0
    ].document_title == ("report")

    again = run_command("load_dataset", str(folder), "--name", "Field notes", "--user", "alice")
    assert "loaded 0, skipped 4, failed 0; 4 documents in all" in again
    assert Document.objects.count() == 4


@pytest.mark.django_db
def test_an_unreadable_file_is_reported_and_the_others_still_load(alice, folder):
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 truncated")
    with pytest.raises(CommandError, match="1 file\\(s\\) could not be loaded:\n  broken.pdf"):
        run_command("load_dataset", str(folder), "--name", "Notes", "--user", "alice")
    assert Document.objects.filter(dataset__name="Notes").count() == 4


def test_load_dataset_exits_non_zero_with_a_clear_error_for_a_missing_folder(tmp_path):
    done = subprocess.run(
        [sys.executable, "manage.py", "load_dataset", str(tmp_path / "nowhere")]
        + ["--name", "X", "--user", "alice"],
        cwd=PROJECT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert f"no folder {tmp_path / 'nowhere'}" in done.stderr


@pytest.mark.django_db
def test_load_dataset_refuses_an_unknown_user_and_an_empty_folder(alice, tmp_path):
    with pytest.raises(CommandError, match="no user named 'carol'"):
        run_command("load_dataset", str(tmp_path), "--name", "X", "--user", "carol")
    with pytest.raises(CommandError, match="has no text, Markdown, HTML or PDF file"):
        run_command("load_dataset", str(tmp_path), "--name", "X", "--user", "alice")
    assert not Dataset.objects.exists()


@pytest.mark.django_db
def test_starter_dataset_is_idempotent_and_answers_the_context_manager_question(alice):
    from pydoc_data.topics import topics

    first = run_command("load_starter_dataset", "--user", "alice")
    second = run_command("load_starter_dataset", "--user", "alice")

    dataset = Dataset.objects.get(owner=alice, name="Python reference")
    assert dataset.documents.count() == len(topics)
    assert f"Created dataset 'Python reference' (id {dataset.pk})" in first
    assert f"{len(topics)} topics added" in first
    assert "Kept dataset 'Python reference'" in second and "0 topics added" in second
    hits = search_chunks(dataset_id=dataset.pk, question=DEMO_QUESTION)
    titles = [hit.document_title for hit in hits]
    assert 'The "with" statement' in titles  # the document "with", named by its heading
    assert any("__exit__" in hit.text for hit in hits)


@pytest.mark.django_db
def test_starter_dataset_needs_a_user():
    with pytest.raises(CommandError, match="no superuser to own the dataset"):
        run_command("load_starter_dataset")
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        run_command("load_starter_dataset", "--user", "nobody")
