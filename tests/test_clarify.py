"""Clarify before starting (issue 27): a lead asks the analyst up to three questions, the root
waits for the answers as for a plan review, and the answers (or a skip) start it, with the
answers in its task. Through the real loop, pool, database and HTTP API, the model scripted
over HTTP; the demo model's rule directly."""

import json

import pytest

from agents.llm.demo import DemoModel
from agents.llm.scripted import call, reply
from research import services
from research.models import Run, RunState
from research.services.clarify import ANSWERS_HEAD
from tests.conftest import wait_finished, wait_for
from tests.helpers import tool_names

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/v1/gb/research"
QUESTIONS = ["Which otters: sea otters or river otters?", "For what purpose is the report?"]


def user_texts(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def start_paused(api, scripted_llm, topic: str) -> dict:
    """Start a research with clarify whose lead asks QUESTIONS; return it once it waits."""
    scripted_llm.script(
        topic,
        call("ask_clarifying_questions", questions=QUESTIONS),
        reply(f"{topic}: the report."),
    )
    started = api.post(URL, {"topic": topic, "clarify": True}, format="json")
    assert started.status_code == 201, started.content
    assert started.json()["clarify"] is True and started.json()["clarification"] is None
    wait_for(lambda: Run.objects.get(pk=started.json()["id"]).status == "paused")
    return api.get(f"{URL}/{started.json()['id']}").json()


def test_the_lead_asks_the_research_waits_and_the_answers_reach_its_task(
    agent_pool, scripted_llm, api
):
    topic = "Otters"
    shown = start_paused(api, scripted_llm, topic)

    assert (shown["status"], shown["state"], shown["active"]) == ("paused", "clarifying", True)
    assert shown["clarification"] == {"questions": QUESTIONS, "answers": None, "skipped": False}
    root = Run.objects.get(pk=shown["id"])
    assert root.worker_id is None and root.paused_at is not None  # no slot, no worker
    assert RunState.objects.filter(run=root, state="clarifying").exists()
    assert "ask_clarifying_questions" in tool_names(scripted_llm.requests_for(topic)[0])
    assert len(scripted_llm.requests_for(topic)) == 1  # nothing runs while it waits

    answered = api.post(
        f"{URL}/{root.pk}/clarify",
        {"answers": ["River otters in Europe", "A school talk"]},
        format="json",
    )
    assert answered.status_code == 200, answered.content
    assert answered.json()["clarification"]["answers"] == [
        "River otters in Europe",
        "A school talk",
    ]

    root = wait_finished(root)
    assert (root.status, root.report) == ("done", "Otters: the report.")
    resumed = scripted_llm.requests_for(topic)[1]
    task = user_texts(resumed)[0]
    assert task.startswith(f"{topic}{ANSWERS_HEAD}")
    assert "Which otters: sea otters or river otters?\n  Answer: River otters in Europe" in task
    assert "Answer: A school talk" in task
    # Asked once: the resumed lead is not offered the questions again.
    assert "ask_clarifying_questions" not in tool_names(resumed)
    assert root.steps == 2 and root.paused_seconds > 0


def test_skipping_starts_the_research_at_once_from_the_topic_as_written(
    agent_pool, scripted_llm, api
):
    topic = "Beavers"
    shown = start_paused(api, scripted_llm, topic)

    skipped = api.post(f"{URL}/{shown['id']}/clarify", {"skip": True}, format="json")

    assert skipped.status_code == 200, skipped.content
    assert skipped.json()["status"] == "queued"
    assert skipped.json()["clarification"] == {
        "questions": QUESTIONS,
        "answers": [],
        "skipped": True,
    }
    root = wait_finished(Run.objects.get(pk=shown["id"]), timeout=10)
    assert root.status == "done"
    assert user_texts(scripted_llm.requests_for(topic)[1])[0] == topic


def test_bad_answers_are_refused_naming_the_field_and_the_research_keeps_waiting(
    agent_pool, scripted_llm, api, api_for, bob
):
    shown = start_paused(api, scripted_llm, "Herons")
    url = f"{URL}/{shown['id']}/clarify"

    too_many = api.post(url, {"answers": ["a", "b", "c"]}, format="json")
    empty = api.post(url, {"answers": ["", "  "]}, format="json")
    nothing = api.post(url, {}, format="json")
    not_a_list = api.post(url, {"answers": "river otters"}, format="json")
    long = api.post(url, {"answers": ["x" * 2001]}, format="json")
    null = api.post(url, {"answers": ["fine", "a\u0000b"]}, format="json")

    assert too_many.status_code == 400
    assert too_many.json() == {"answers": ["the lead asked 2 questions; 3 answers is too many."]}
    assert empty.json()["answers"] == [
        "every answer is empty: answer at least one question, or skip them to start without "
        "answers."
    ]
    assert "skip" in nothing.json()["answers"][0]
    assert not_a_list.status_code == 400 and "answers" in not_a_list.json()
    assert long.json() == {"answers": ["answer 1 is 2001 characters; the limit is 2000."]}
    # One flat list naming the answer, as every field error of the API (schemathesis found
    # DRF's object keyed by index).
    assert null.json() == {"answers": ["answer 2: Null characters are not allowed."]}
    assert api_for(bob).post(url, {"skip": True}, format="json").status_code == 404
    assert Run.objects.get(pk=shown["id"]).status == "paused"

    both = api.post(url, {"answers": ["Alpine", "for a talk"], "skip": True}, format="json")
    assert both.status_code == 400  # the answers were thrown away without a word
    assert both.json() == {
        "skip": [
            "answers and skip go apart: send the answers, or skip (true) to start without them."
        ]
    }
    assert api.post(url, {"answers": ["", "for a talk"]}, format="json").status_code == 200
    again = api.post(url, {"skip": True}, format="json")
    assert again.status_code == 409  # a refusal of what the research's state allows
    assert again.json()["detail"].startswith(
        f"research {shown['id']} is not waiting for answers to questions: it is "
    )
    # A plan approval is not an answer: the clarify step has its own door.
    wait_finished(Run.objects.get(pk=shown["id"]))


def test_a_plan_approval_does_not_answer_the_questions(agent_pool, scripted_llm, api):
    shown = start_paused(api, scripted_llm, "Kingfishers")

    approved = api.post(f"{URL}/{shown['id']}/plan/approve", {}, format="json")

    assert approved.status_code == 409
    assert approved.json()["detail"] == (
        f"research {shown['id']} is not waiting for a plan review: it needs your answers."
    )
    assert Run.objects.get(pk=shown["id"]).status == "paused"
    api.post(f"{URL}/{shown['id']}/cancel")


def test_without_clarify_the_lead_is_not_offered_the_questions_and_late_asking_is_refused(
    agent_pool, scripted_llm, api
):
    plain, late = "Plain dippers, no questions", "Dippers asked too late"
    scripted_llm.script(plain, reply("plain report"))
    scripted_llm.script(
        late,
        call("write_plan", items=["Diving"]),
        call("ask_clarifying_questions", questions=["Which dippers?"]),
        reply("late report"),
    )
    first = api.post(URL, {"topic": plain}, format="json").json()
    second = api.post(URL, {"topic": late, "clarify": True}, format="json").json()

    wait_finished(Run.objects.get(pk=first["id"]))
    root = wait_finished(Run.objects.get(pk=second["id"]))
    assert "ask_clarifying_questions" not in tool_names(scripted_llm.requests_for(plain)[0])
    assert (
        "ask_clarifying_questions"
        not in scripted_llm.requests_for(plain)[0]["messages"][0]["content"]
    )
    (refused,) = scripted_llm.tool_results(late, name="ask_clarifying_questions")
    assert refused["content"] == (
        "error: clarifying questions come before the research, and you have started it: go "
        "on with the topic as it is"
    )
    assert (root.status, root.clarification) == ("done", None)


def test_the_clarify_option_is_in_the_api_schema(api):
    schema = api.get("/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    start = schema["components"]["schemas"]["RunStart"]["properties"]
    assert start["clarify"]["type"] == "boolean"
    operation = schema["paths"]["/v1/gb/research/{run_id}/clarify"]["post"]
    assert operation["operationId"] == "research_clarify"
    run = schema["components"]["schemas"]["RunOutput"]["properties"]
    assert "clarification" in run


# --- the demo model's rule ------------------------------------------------------------------

ASK_TOOL = [{"type": "function", "function": {"name": "ask_clarifying_questions"}}]


def demo_turn(topic: str, tools=ASK_TOOL):
    messages = [{"role": "system", "content": "research"}, {"role": "user", "content": topic}]
    return DemoModel().chat(model="demo", messages=messages, tools=tools)


@pytest.mark.django_db(transaction=False)
def test_the_demo_model_asks_when_the_topic_has_fewer_than_five_words():
    short = demo_turn("Python decorators?")
    (asked,) = short.tool_calls
    long = demo_turn("How do Python's context managers and exceptions interact?")
    no_tool = demo_turn("Python decorators?", tools=[])

    assert asked.name == "ask_clarifying_questions"
    questions = json.loads(asked.arguments)["questions"]
    assert questions[0] == "Which part of “Python decorators” should the research cover?"
    assert len(questions) == 3
    assert all(call.name != "ask_clarifying_questions" for call in long.tool_calls)
    assert all(call.name != "ask_clarifying_questions" for call in no_tool.tool_calls)


def test_offline_the_demo_lead_asks_on_a_short_topic_and_its_report_follows_the_answer(
    agent_pool, alice
):
    root = services.run_start(owner=alice, topic="Python decorators", model="demo", clarify=True)
    wait_for(lambda: Run.objects.get(pk=root.pk).status == "paused", timeout=30)
    asked = Run.objects.get(pk=root.pk).clarification["questions"]

    services.clarify_answer(run=root, answers=["the with statement"])

    root = wait_finished(root, timeout=60)
    assert len(asked) == 3 and asked[0].startswith("Which part of “Python decorators”")
    assert root.status == "done" and "the with statement" in root.report
