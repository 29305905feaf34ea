"""What the commands say, and exit with, when they refuse: one line naming the problem and a
non-zero status, never a traceback and never a refusal that exits 0 (load_dataset, research
export -o, research answer, mcp without --user)."""

import io
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from research import services
from research.models import Dataset, Run
from tests.conftest import PROJECT, process_env


def refusal(*args: str) -> CommandError:
    """The CommandError a command ends with (manage.py prints it and exits with returncode)."""
    with pytest.raises(CommandError) as refused:
        call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
    return refused.value


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "owls.txt").write_text("Owls hunt at night over the moor.")
    return folder


# --- load_dataset --------------------------------------------------------------------------


def test_load_dataset_with_an_empty_name_exits_1_with_one_line(
    transactional_db, alice, notes, settings
):
    """It ended in a traceback whose last line was research.errors.InvalidInput."""
    done = subprocess.run(
        [sys.executable, "manage.py", "load_dataset", str(notes), "--name", "", "--user", "alice"],
        cwd=PROJECT,
        env=process_env(settings),
        capture_output=True,
        text=True,
    )

    assert (done.returncode, done.stderr) == (
        1,
        "CommandError: invalid --name: name must not be empty.\n",
    )
    assert not Dataset.objects.exists()


@pytest.mark.django_db
def test_load_dataset_refuses_a_name_too_long_or_blank(alice, notes):
    too_long = refusal("load_dataset", str(notes), "--name", "n" * 300, "--user", "alice")
    blank = refusal("load_dataset", str(notes), "--name", "  \t ", "--user", "alice")

    assert str(too_long) == "invalid --name: name is longer than 200 characters."
    assert str(blank) == "invalid --name: name must not be empty."
    assert too_long.returncode == blank.returncode == 1
    assert not Dataset.objects.exists()


@pytest.mark.django_db
def test_load_dataset_finds_again_the_dataset_of_a_name_with_control_characters(alice, notes):
    """The lookup stripped spaces only, the service control characters too: the second load
    tried to create the dataset again and was refused as a duplicate."""
    call_command(
        "load_dataset",
        str(notes),
        "--name",
        "Field\x07 notes",
        "--user",
        "alice",
        stdout=io.StringIO(),
    )
    (notes / "bees.txt").write_text("Bees fan their wings to cool the hive.")
    out = io.StringIO()

    call_command(
        "load_dataset", str(notes), "--name", "Field\x07 notes", "--user", "alice", stdout=out
    )

    assert "loaded 1, skipped 1, failed 0; 2 documents in all." in out.getvalue()
    assert list(Dataset.objects.values_list("name", flat=True)) == ["Field notes"]


@pytest.mark.django_db
def test_a_file_that_cannot_be_read_is_reported_and_the_others_load(alice, notes, monkeypatch):
    (notes / "locked.txt").write_text("Secret.")
    read_bytes = Path.read_bytes

    def unreadable(path: Path) -> bytes:
        if path.name == "locked.txt":
            raise PermissionError(13, "Permission denied")
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", unreadable)

    refused = refusal("load_dataset", str(notes), "--name", "Notes", "--user", "alice")

    assert str(refused) == "1 file(s) could not be loaded:\n  locked.txt: Permission denied"
    assert refused.returncode == 1
    assert Dataset.objects.get(name="Notes").documents.count() == 1


# --- research export -o ----------------------------------------------------------------------


@pytest.fixture
def done_run(run_factory) -> Run:
    run = run_factory(topic="Otters")
    services.run_finish(run_id=run.pk, report="# Otters\n\nOtters hold hands while they sleep.")
    return run


@pytest.mark.parametrize("export_format", ["md", "json", "pdf", "docx"])
def test_export_into_a_directory_that_does_not_exist_is_refused(
    db, alice, done_run, tmp_path, export_format
):
    """It crashed with FileNotFoundError."""
    target = tmp_path / "nonexistent_dir" / f"x.{export_format}"

    refused = refusal(
        "research",
        "export",
        str(done_run.pk),
        "--format",
        export_format,
        "-o",
        str(target),
        "--user",
        "alice",
    )

    assert str(refused) == f"cannot write {target}: the directory {target.parent} does not exist."
    assert refused.returncode == 1
    assert not target.parent.exists()


@pytest.mark.parametrize("export_format", ["md", "json", "pdf", "docx"])
def test_export_to_a_directory_is_refused(db, alice, done_run, tmp_path, export_format):
    """It crashed with IsADirectoryError."""
    refused = refusal(
        "research",
        "export",
        str(done_run.pk),
        "--format",
        export_format,
        "-o",
        str(tmp_path),
        "--user",
        "alice",
    )

    assert str(refused) == (
        f"cannot write {tmp_path}: it is a directory "
        f"(give a file: -o {tmp_path}/research.{export_format})."
    )
    assert refused.returncode == 1
    assert list(tmp_path.iterdir()) == []


def test_export_with_events_into_a_missing_directory_is_refused(db, alice, done_run, tmp_path):
    target = tmp_path / "gone" / "x.json"

    refused = refusal(
        "research",
        "export",
        str(done_run.pk),
        "--format",
        "json",
        "--events",
        "-o",
        str(target),
        "--user",
        "alice",
    )

    assert str(refused) == f"cannot write {target}: the directory {target.parent} does not exist."


def test_export_to_a_file_still_writes_it(db, alice, done_run, tmp_path):
    target = tmp_path / "otters.md"
    out = io.StringIO()

    call_command(
        "research", "export", str(done_run.pk), "-o", str(target), "--user", "alice", stdout=out
    )

    assert out.getvalue() == f"research {done_run.pk}: md written to {target}.\n"
    assert target.read_text().startswith("# Otters")


# --- research answer ---------------------------------------------------------------------------


def test_answer_on_a_research_that_asked_nothing_is_refused(db, alice, done_run):
    """It printed "asked no questions" and exited 0, where the API refuses the answers."""
    refused = refusal("research", "answer", str(done_run.pk), "--user", "alice")

    assert str(refused) == f"research {done_run.pk} asked no questions."
    assert refused.returncode == 1


def test_answer_on_a_sub_agent_is_refused(db, alice, run_factory, subagent_factory):
    root = run_factory(topic="Otters")
    child = subagent_factory(root, "habitat")

    refused = refusal("research", "answer", str(child.pk), "--user", "alice")

    assert str(refused) == (
        f"run {child.pk} is a sub-agent: it asked no questions "
        f"(its research, {root.pk}, asks them)."
    )
    assert refused.returncode == 1


def test_answer_on_a_research_that_may_still_ask_says_not_yet(db, alice, run_factory):
    root = run_factory(topic="Otters", clarify=True)

    refused = refusal("research", "answer", str(root.pk), "--user", "alice")

    assert str(refused) == f"research {root.pk} asked no questions yet."
    assert refused.returncode == 1


# --- which user ----------------------------------------------------------------------------------


def test_mcp_without_user_among_several_says_it_needs_the_user_it_acts_for(
    db, alice, bob, monkeypatch
):
    """It said "several users could own this research", a research command's words."""
    monkeypatch.delenv("CANOPY_USER", raising=False)

    refused = refusal("mcp")

    assert str(refused) == (
        "several users exist: pass --user or set CANOPY_USER "
        "to say which user the MCP server acts for."
    )
    assert refused.returncode == 1


def test_research_without_user_among_several_says_whose_researches(db, alice, bob, monkeypatch):
    monkeypatch.delenv("CANOPY_USER", raising=False)

    refused = refusal("research", "list")

    assert str(refused) == (
        "several users exist: pass --user or set CANOPY_USER to say whose researches to work on."
    )
    assert refused.returncode == 1


def test_mcp_with_an_unknown_user_is_refused(db, alice, monkeypatch):
    monkeypatch.delenv("CANOPY_USER", raising=False)
    assert User.objects.count() == 1

    refused = refusal("mcp", "--user", "zed")

    assert (str(refused), refused.returncode) == ("no user named 'zed'.", 1)
