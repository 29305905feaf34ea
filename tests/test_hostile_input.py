"""Hostile input (issue 16): JSON nested 1,000 deep, and terminal escape sequences in topics,
names, reasons and messages."""

import io

import pytest
from django.core.management import call_command

from agents.llm.scripted import call, reply
from research import services
from research.models import Dataset, Message, Run, RunState
from tests.conftest import wait_finished
from tests.test_cli import Terminal

pytestmark = pytest.mark.django_db

RESEARCH = "/v1/gb/research"
DATASETS = "/v1/gb/datasets"
DEEP = "[" * 1000 + "]" * 1000
HOSTILE = "Why\x1b[31m red\x1b[0m?\x07\x08 tab\there\r\nnext\x9b1m"


@pytest.mark.parametrize("url", [RESEARCH, DATASETS])
def test_json_nested_a_thousand_deep_is_a_400_naming_the_nesting(api, url):
    response = api.post(url, DEEP, content_type="application/json")

    assert response.status_code == 400
    assert "nests arrays and objects more than 32 levels deep" in response.json()["detail"]
    assert not Run.objects.exists() and not Dataset.objects.exists()


def test_json_nested_a_few_levels_with_brackets_in_strings_is_parsed(api):
    body = '{"topic": "' + "[[[{{" * 40 + '", "max_steps": 3}'
    response = api.post(RESEARCH, body, content_type="application/json")

    assert response.status_code == 201, response.json()
    assert response.json()["topic"] == "[[[{{" * 40


def test_control_characters_are_stripped_from_a_topic(api):
    response = api.post(RESEARCH, {"topic": HOSTILE}, format="json")

    assert response.status_code == 201
    topic = Run.objects.get().topic
    assert topic == response.json()["topic"] == "Why[31m red[0m? tab\there\nnext1m"


def test_control_characters_are_stripped_from_sub_agents_and_messages(alice, run_factory):
    root = run_factory()
    hostile = services.Launch(name="a\x1bb", reason=f"reason {HOSTILE}", task=HOSTILE, max_steps=3)
    child = services.subagent_create(parent_id=root.pk, launch=hostile)
    plain = services.Launch(name="sibling", reason="r", task="t", max_steps=3)
    sibling = services.subagent_create(parent_id=root.pk, launch=plain)
    services.message_record(from_run_id=child.pk, to_run_id=sibling.pk, text=HOSTILE)

    child.refresh_from_db()
    stored = [child.name, child.reason, child.topic, Message.objects.get().text]
    assert not any(char in text for text in stored for char in "\x1b\x07\x08\r\x9b")
    assert child.name == "ab"


def test_a_dataset_name_with_escapes_is_stored_without_them(api):
    response = api.post(DATASETS, {"name": "notes\x1b]0;pwned\x07"}, format="json")

    assert response.status_code == 201
    assert response.json()["name"] == "notes]0;pwned"


def test_text_of_only_invisible_marks_is_empty_everywhere(api, run_factory):
    """A topic of two zero-width spaces started a research about nothing, and a dataset
    named "\u200b" was made, where control characters alone are refused as empty."""
    invisible = "\u200b\u200b \ufeff\u2060"
    topic = api.post(RESEARCH, {"topic": invisible}, format="json")
    assert (topic.status_code, topic.json()) == (400, {"topic": ["topic must not be empty."]})
    name = api.post(DATASETS, {"name": "\u200b"}, format="json")
    assert (name.status_code, name.json()) == (400, {"name": ["name must not be empty."]})
    assert not Run.objects.exists() and not Dataset.objects.exists()
    research = run_factory()
    services.run_claim(run_id=research.pk)
    note = api.post(f"{RESEARCH}/{research.pk}/notes", {"text": "\u200d"}, format="json")
    assert (note.status_code, note.json()) == (400, {"text": ["text must not be empty."]})
    for marks in ("\u2066\u2069\u202e", "\u3164", "\u034f\ufe0f", "\U000e0041"):  # bidi,
        # a filler, marks on nothing, a tag
        refused = api.post(RESEARCH, {"topic": marks}, format="json")
        assert refused.status_code == 400, ascii(marks)
    # A word with a zero-width joiner in it is a word.
    kept = api.post(
        RESEARCH, {"topic": "Emoji \U0001f469\u200d\U0001f52c sequences"}, format="json"
    )
    assert kept.status_code == 201


@pytest.mark.parametrize("terminal", [False, True], ids=["plain", "rich"])
def test_research_show_prints_old_escape_sequences_as_text(alice, run_factory, terminal):
    """Text stored before the stripping (or written straight to the database) is printed
    with its control characters escaped, never raw."""
    run = run_factory()
    Run.objects.filter(pk=run.pk).update(topic=HOSTILE, report=f"# Report\n{HOSTILE}")
    out = Terminal() if terminal else io.StringIO()

    call_command("research", "show", str(run.pk), "--user", "alice", stdout=out)

    shown = out.getvalue()
    assert "\\x1b[31m" in shown and "\\x07" in shown
    # What is left are rich's own styles: no red, no bell, no backspace, no CSI.
    assert "\x1b[31m" not in shown
    assert not any(char in shown for char in "\x07\x08\x9b")


def test_escapes_a_model_writes_into_tool_arguments_are_not_stored_in_state_details(
    agent_pool, scripted_llm, alice
):
    topic = "Do escapes in tool arguments reach the timeline?"
    scripted_llm.script(
        topic,
        call("wait_subagents", names=["\x1b[2J\x1b]0;pwned\x07ghost\r"]),
        reply("done"),
    )
    root = wait_finished(services.run_start(owner=alice, topic=topic))

    details = list(RunState.objects.filter(run=root).values_list("detail", flat=True))
    assert any("ghost" in detail for detail in details)
    assert not any(char in detail for detail in details for char in "\x1b\x07\r")


def test_an_answer_or_a_title_of_invisible_marks_is_none(api, run_factory, alice):
    """An answer of zero-width spaces counted as an answer, and an upload titled "\u200b"
    was shown as given: a document named by nothing on every page."""
    from research.errors import InvalidInput
    from research.services.clarify import validate_answers
    from research.services.datasets import dataset_create, document_add

    with pytest.raises(InvalidInput, match="every answer is empty"):
        validate_answers(["\u200b\u200b", " \u2060"], asked=2)
    assert validate_answers(["Alpine", "\u200b"], asked=2) == ["Alpine", ""]
    dataset = dataset_create(owner=alice, name="Coasts")
    named = document_add(dataset=dataset, title="\u200b", data=b"Dunes move.", filename="dunes.txt")
    assert (named.title, named.title_given) == ("dunes", False)
