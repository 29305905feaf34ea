"""The agent loop over the scripted LLM: rounds, usage and cost, tool errors, budget, cancel."""

import time
from decimal import Decimal

import pytest
from django.db.models import Sum

from agents.llm import reset_clients
from agents.llm.scripted import ScriptedLLM, call, calls, fail, raw_call, reply, slow
from research import services
from research.models import LLMCall, Run, RunState, Step
from tests.conftest import wait_finished, wait_for
from tests.helpers import start

pytestmark = pytest.mark.django_db(transaction=True)


def test_three_tool_rounds_then_report_record_usage_and_cost(agent_pool, scripted_llm, alice):
    scripted_llm.script(
        "volcanoes",
        call("web_search", query="volcano types", usage=(1000, 50)),
        call("read_page", url="file:///etc/passwd", usage=(2000, 60)),
        call("web_search", query="supervolcano", usage=(3000, 70)),
        reply("# Volcanoes\n\nThree kinds.", usage=(4000, 400)),
    )
    run = wait_finished(start(alice, "Tell me about volcanoes"))

    assert run.status == "done", run.error
    assert run.report == "# Volcanoes\n\nThree kinds."
    assert run.steps == 4
    assert (run.input_tokens, run.output_tokens) == (10000, 580)
    # The scripted model is priced at $1 / $2 per million tokens in tests/settings.py.
    expected = (Decimal(10000) * 1 + Decimal(580) * 2) / 1_000_000
    assert run.cost_usd == expected
    assert run.tree_cost_usd == expected
    calls_ = LLMCall.objects.filter(run=run)
    assert calls_.count() == 4
    assert calls_.aggregate(total=Sum("cost_usd"))["total"] == expected
    assert [s.kind for s in Step.objects.filter(run=run)] == ["model", "tool"] * 3 + ["model"]
    states = list(RunState.objects.filter(run=run).values_list("state", flat=True))
    assert states[0] == "queued" and states[-1] == "ended"
    assert {"thinking", "searching", "reading"} <= set(states)


def test_malformed_tool_call_gets_an_error_result_and_the_run_recovers(
    agent_pool, scripted_llm, alice
):
    scripted_llm.script(
        "malformed",
        raw_call("web_search", '{"query": "unterminated'),
        call("web_search", limit=3),
        call("no_such_tool", x=1),
        reply("Recovered."),
    )
    run = wait_finished(start(alice, "A malformed call"))

    assert run.status == "done" and run.report == "Recovered."
    results = [r["content"] for r in scripted_llm.tool_results("malformed")]
    assert results[0].startswith("error: the arguments of web_search are not valid JSON")
    assert "invalid arguments for web_search" in results[1] and "query" in results[1]
    assert results[2].startswith("error: there is no tool 'no_such_tool'")
    assert Step.objects.filter(run=run, is_error=True).count() == 3
    # The transcript keeps a call it refused as the model sent it.
    inputs = list(Step.objects.filter(run=run, kind="tool").order_by("id").values_list("input"))
    assert inputs[0] == ({"raw": '{"query": "unterminated'},)
    assert inputs[1] == ({"raw": '{"limit": 3}'},)


def test_a_tool_called_without_arguments_is_recorded_with_none_not_raw_text(
    agent_pool, scripted_llm, alice
):
    scripted_llm.script("no arguments", call("wait_subagents"), reply("Alone."))
    run = wait_finished(start(alice, "no arguments"))

    assert Step.objects.get(run=run, kind="tool").input == {}


def test_a_500_then_200_endpoint_succeeds_on_retry(agent_pool, scripted_llm, alice):
    scripted_llm.script("flaky", fail(500), reply("Made it."))
    run = wait_finished(start(alice, "A flaky endpoint"))
    assert run.status == "done" and run.report == "Made it."
    assert run.steps == 1


def test_a_dead_endpoint_fails_only_that_run(agent_pool, settings, alice):
    """Two endpoints cannot be configured at once, so the dead one is a model priced
    separately that the scripted server always answers 503 for."""
    settings.LLM_MAX_RETRIES = 1
    with ScriptedLLM() as llm:
        llm.script("doomed", fail(503, times=10))
        llm.script("healthy", reply("Fine."))
        settings.OPENAI_BASE_URL = llm.base_url
        port = llm.base_url.split(":")[2].split("/")[0]
        reset_clients()
        doomed = start(alice, "A doomed research")
        healthy = start(alice, "A healthy research")
        doomed, healthy = wait_finished(doomed), wait_finished(healthy)
    reset_clients()
    assert doomed.status == "failed"
    assert doomed.error == f"llm: 503 from 127.0.0.1:{port} after 2 tries"
    assert healthy.status == "done" and healthy.report == "Fine."


def test_an_endpoint_that_is_down_fails_the_run_with_a_readable_error(agent_pool, settings, alice):
    settings.OPENAI_BASE_URL = ScriptedLLM.down_url()
    settings.LLM_MAX_RETRIES = 0
    reset_clients()
    run = wait_finished(start(alice, "Nobody answers"))
    reset_clients()
    assert run.status == "failed"
    assert run.error.startswith("llm: cannot connect to 127.0.0.1:")


def test_cancel_mid_run_ends_it_within_a_second(agent_pool, scripted_llm, alice):
    # 0.1 s a call: the research would take 3 s, so the cancel comes while it works.
    scripted_llm.script(
        "long", *[slow(0.1, call("web_search", query=f"q{i}")) for i in range(30)], reply("never")
    )
    run = start(alice, "A long research", max_steps=40)
    wait_for(lambda: Run.objects.get(pk=run.pk).steps >= 2)
    cancelled_at = time.monotonic()
    services.run_cancel(run=run)
    wait_for(lambda: Run.objects.get(pk=run.pk).status == "failed", timeout=5)
    assert time.monotonic() - cancelled_at < 1.0
    run.refresh_from_db()
    assert run.error == "cancelled by the user"


def test_cancel_reaches_an_agent_waiting_on_a_slow_model_at_its_next_round(
    agent_pool, scripted_llm, alice
):
    # The call lasts long enough for the cancel to come while it is out, on a loaded machine
    # too (at 0.3 s, CI once saw the research end done before the cancel was read).
    scripted_llm.script("slowish", slow(1.5, call("web_search", query="x")), reply("never"))
    run = start(alice, "A slowish research")
    wait_for(lambda: Run.objects.get(pk=run.pk).status == "working")
    services.run_cancel(run=run)
    run = wait_finished(run, timeout=5)
    assert run.status == "failed" and run.error == "cancelled by the user"


def test_max_steps_is_honoured_with_a_final_round_without_tools(agent_pool, scripted_llm, alice):
    scripted_llm.script(
        "budget",
        call("web_search", query="one"),
        call("web_search", query="two"),
        reply("Report from what I had."),
    )
    run = wait_finished(start(alice, "A budget research", max_steps=2))

    assert run.status == "done" and run.report == "Report from what I had."
    assert run.steps == 3  # the budget, plus one round to write
    requests = scripted_llm.requests_for("budget")
    assert [bool(r.get("tools")) for r in requests] == [True, True, False]
    assert "step budget is spent" in requests[-1]["messages"][-1]["content"]


def test_tool_calls_of_one_turn_all_get_results(agent_pool, scripted_llm, alice):
    scripted_llm.script(
        "several",
        calls(call("web_search", query="a"), call("web_search", query="b")),
        reply("ok"),
    )
    wait_finished(start(alice, "several calls at once"))
    assert len(scripted_llm.tool_results("several")) == 2


def test_system_prompt_is_the_prompt_files_joined(agent_pool, scripted_llm, alice):
    from agents import prompts

    scripted_llm.script("prompted", reply("ok"))
    wait_finished(start(alice, "prompted research"))
    system = scripted_llm.requests_for("prompted")[0]["messages"][0]["content"]
    assert system.startswith(prompts.load("research"))
    assert prompts.load("spawn") in system  # a root may spawn
    assert prompts.load("messaging") not in system  # a root has no siblings
