"""Several tool calls of one model turn: independent reads run at once, results in call order;
the spawns of one turn start their children together."""

import pytest

from agents.llm.scripted import call, calls, reply
from research import services
from research.models import Run, Step
from tests.conftest import wait_finished
from tests.fakeweb import FakeWeb

pytestmark = pytest.mark.django_db(transaction=True)


def read(web: FakeWeb, number: int, seconds: float = 0.6) -> object:
    return call("read_page", url=f"{web.url}/slow?seconds={seconds}&page={number}")


def pages_in_results(llm, topic: str) -> list[str]:
    return [
        result["content"].split("page=")[1].split()[0]
        for result in llm.tool_results(topic, name="read_page")
    ]


def test_page_reads_of_one_turn_run_at_once_and_answer_in_call_order(
    agent_pool, scripted_llm, alice, web
):
    scripted_llm.script("three pages", calls(*(read(web, n) for n in (1, 2, 3))), reply("done"))

    run = wait_finished(services.run_start(owner=alice, topic="three pages"))

    assert run.status == "done"
    assert web.most_in_flight == 3
    assert pages_in_results(scripted_llm, "three pages") == ["1", "2", "3"]
    steps = Step.objects.filter(run=run, kind="tool").order_by("id")
    assert [step.input["url"].rsplit("=", 1)[1] for step in steps] == ["1", "2", "3"]


def test_no_more_calls_run_at_once_than_the_setting_allows(
    agent_pool, scripted_llm, alice, web, settings
):
    settings.RESEARCH_PARALLEL_TOOL_CALLS = 2
    scripted_llm.script("four pages", calls(*(read(web, n) for n in (1, 2, 3, 4))), reply("done"))

    wait_finished(services.run_start(owner=alice, topic="four pages"))

    assert web.most_in_flight == 2
    assert pages_in_results(scripted_llm, "four pages") == ["1", "2", "3", "4"]


def test_a_read_waiting_for_a_place_takes_the_first_one_free(
    agent_pool, scripted_llm, alice, web, settings
):
    settings.RESEARCH_PARALLEL_TOOL_CALLS = 2
    pages = (read(web, 1, seconds=0.1), read(web, 2, seconds=1.5), read(web, 3, seconds=0.1))
    scripted_llm.script("uneven pages", calls(*pages), reply("done"))

    wait_finished(services.run_start(owner=alice, topic="uneven pages"))

    # The third waited for the first's place, not for the slow second to end.
    assert web.slow_spans["3"][0] < web.slow_spans["2"][1]
    assert web.most_in_flight == 2
    assert pages_in_results(scripted_llm, "uneven pages") == ["1", "2", "3"]


def test_a_call_that_is_not_a_read_waits_for_the_reads_before_it(
    agent_pool, scripted_llm, alice, web
):
    scripted_llm.script(
        "reads then a wait",
        calls(read(web, 1), read(web, 2), call("wait_subagents"), read(web, 3)),
        reply("done"),
    )

    run = wait_finished(services.run_start(owner=alice, topic="reads then a wait"))

    names = list(Step.objects.filter(run=run, kind="tool").values_list("tool", flat=True))
    assert names == ["read_page", "read_page", "wait_subagents", "read_page"]
    assert web.most_in_flight == 2
    (waited,) = scripted_llm.tool_results("reads then a wait", name="wait_subagents")
    assert waited["content"] == "error: you have no sub-agents to wait for"


def test_children_spawned_in_one_turn_see_each_other_from_their_first_step(
    agent_pool, scripted_llm, alice
):
    tasks = {name: f"the {name} side of tides, in detail" for name in ("moon", "sun", "wind")}
    scripted_llm.script(
        "tides research",
        calls(
            *(
                call("spawn_subagent", name=name, reason=f"{name} alone", task=task)
                for name, task in tasks.items()
            )
        ),
        call("wait_subagents"),
        reply("root report"),
    )
    for task in tasks.values():
        scripted_llm.script(task, call("list_siblings"), reply("child report"))

    root = wait_finished(services.run_start(owner=alice, topic="tides research"))

    assert Run.objects.filter(parent=root, status="done").count() == 3
    for name, task in tasks.items():
        (first,) = scripted_llm.tool_results(task, name="list_siblings")
        others = {other for other in tasks if other != name}
        assert {
            line.split(" [")[0].lstrip("- ") for line in first["content"].splitlines()
        } == others
