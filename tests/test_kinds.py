"""Sub-agent kinds, model tiers, batch launch, inspect_subagent, reports delivered to the parent,
per-parent working places and deadlines (issue 13, seeds 001 and 002): through the real loop,
pool and database, the model scripted over HTTP."""

import textwrap
import threading
from pathlib import Path

import pytest

from agents import kinds
from agents.hosting import warm_up
from agents.llm.scripted import call, calls, reply, slow
from agents.runtime.tree import REPORTS_HEADER
from research.models import Event, Run, RunState
from tests.conftest import manage_check, wait_finished, wait_for
from tests.helpers import results, start, tool_names

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True, scope="module")
def _warm():
    """The tests with deadlines of a few seconds must not spend them on the first import of
    the tools (the MCP SDK: seconds on a busy machine), whichever test runs first."""
    warm_up()


def launch(name: str, task: str, **extra) -> dict:
    return {"name": name, "reason": f"{name} covers its own part", "task": task, **extra}


def spawn(name: str, task: str, **extra):
    return call("spawn_subagent", **launch(name, task, **extra))


def child(root: Run, name: str) -> Run:
    return Run.objects.get(parent=root, name=name)


@pytest.fixture
def tiers(settings):
    settings.RESEARCH_MODEL_PRICES = {
        **settings.RESEARCH_MODEL_PRICES,
        "scripted-large": (2, 8),
        "scripted-small": (0.5, 1),
    }
    settings.RESEARCH_MODEL_TIERS = {"high": "scripted-large", "low": "scripted-small"}
    yield settings.RESEARCH_MODEL_TIERS


# --- kinds and tiers ----------------------------------------------------------------------------


def test_the_parent_reads_the_kinds_and_tiers_and_the_schema_offers_only_those(
    agent_pool, scripted_llm, alice, tiers
):
    scripted_llm.script("kinds menu research", reply("no need to spawn"))
    wait_finished(start(alice, "kinds menu research"))
    request = scripted_llm.requests_for("kinds menu research")[0]
    prompt = request["messages"][0]["content"]
    assert "- researcher: Researches one self-contained part" in prompt
    assert "- verifier: Reads a draft report and the sources it cites" in prompt
    assert "- high: scripted-large" in prompt and "- low: scripted-small" in prompt
    spawn_tool = next(t for t in request["tools"] if t["function"]["name"] == "spawn_subagent")
    properties = spawn_tool["function"]["parameters"]["properties"]
    assert properties["kind"]["enum"] == ["researcher", "verifier"]
    assert properties["tier"]["enum"] == ["high", "low"]
    assert {"spawn_subagents", "inspect_subagent"} <= tool_names(request)


def test_without_tiers_the_parameter_is_absent_and_a_child_runs_on_its_parents_model(
    agent_pool, scripted_llm, alice
):
    scripted_llm.script(
        "no tiers research", spawn("plain", "plain task"), call("wait_subagents"), reply("r")
    )
    scripted_llm.script("plain task", reply("plain report"))
    root = wait_finished(start(alice, "no tiers research"))
    request = scripted_llm.requests_for("no tiers research")[0]
    spawn_tool = next(t for t in request["tools"] if t["function"]["name"] == "spawn_subagent")
    assert "tier" not in spawn_tool["function"]["parameters"]["properties"]
    plain = child(root, "plain")
    assert (plain.kind, plain.tier, plain.model) == ("researcher", "", root.model)


def test_unknown_kind_and_tier_are_refused_with_the_valid_ones(
    agent_pool, scripted_llm, alice, tiers
):
    scripted_llm.script(
        "unknown kind research",
        calls(
            spawn("a", "task a", kind="poet"),
            spawn("b", "task b", tier="ultra"),
            call("spawn_subagents", subagents=[launch("c", "task c", kind="poet")]),
        ),
        reply("root"),
    )
    root = wait_finished(start(alice, "unknown kind research"))
    kind_error, tier_error = results(scripted_llm, "unknown kind research", "spawn_subagent")
    assert kind_error == (
        "error: invalid arguments for spawn_subagent: kind: 'poet' is not one of "
        "['researcher', 'verifier']"
    )
    assert tier_error == (
        "error: invalid arguments for spawn_subagent: tier: 'ultra' is not one of ['high', 'low']"
    )
    (batch_error,) = results(scripted_llm, "unknown kind research", "spawn_subagents")
    assert batch_error == (
        'error: invalid arguments for spawn_subagents: subagents: entry 1 ("c"): kind: '
        "'poet' is not one of ['researcher', 'verifier']"
    )
    assert not Run.objects.filter(parent=root).exists()


def test_a_childs_model_comes_from_its_tier_and_the_page_data_says_so(
    agent_pool, scripted_llm, alice, tiers
):
    scripted_llm.script(
        "tiered research",
        calls(spawn("deep", "deep task", tier="high"), spawn("quick", "quick task", tier="low")),
        call("wait_subagents"),
        reply("root"),
    )
    scripted_llm.script("deep task", reply("deep report"))
    scripted_llm.script("quick task", reply("quick report"))
    root = wait_finished(start(alice, "tiered research"))
    deep, quick = child(root, "deep"), child(root, "quick")
    assert (deep.tier, deep.model) == ("high", "scripted-large")
    assert (quick.tier, quick.model) == ("low", "scripted-small")
    # The request went to the tier's model, and the ledger priced it at the tier's price.
    assert scripted_llm.requests_for("deep task")[0]["model"] == "scripted-large"
    assert deep.llm_calls.get().model == "scripted-large"
    assert str(deep.cost_usd) == "0.00036000"  # 100 in at $2/M + 20 out at $8/M
    created = Event.objects.get(root=root, type="run.created", payload__run=deep.pk).payload
    assert (created["data"]["kind"], created["data"]["tier"]) == ("researcher", "high")
    assert created["data"]["model"] == "scripted-large"


def test_a_child_never_gets_a_research_tool_its_parent_lacks(
    agent_pool, scripted_llm, alice, settings, tmp_path
):
    # An admin's kind that lists the knowledge-base tools; the root has no dataset, so it has
    # neither query nor remember, and neither may its child.
    (tmp_path / "librarian.md").write_text(
        textwrap.dedent(
            """\
            ---
            name: librarian
            description: Looks things up in the knowledge base and on pages.
            tools: [read_page, query, remember]
            steps: {min: 2, max: 6, default: 4}
            ---
            You are a librarian. Report what you found, with sources.
            """
        )
    )
    settings.RESEARCH_AGENT_KINDS_DIR = str(tmp_path)
    scripted_llm.script(
        "tool scope research",
        calls(
            spawn("lib", "library task", kind="librarian"),
            spawn("check", "check task", kind="verifier", max_steps=99),
        ),
        call("wait_subagents"),
        reply("root"),
    )
    scripted_llm.script("library task", reply("lib report"))
    scripted_llm.script("check task", reply("check report"))
    root = wait_finished(start(alice, "tool scope research"))
    assert "query" not in tool_names(scripted_llm.requests_for("tool scope research")[0])

    lib_request = scripted_llm.requests_for("library task")[0]
    assert tool_names(lib_request) & set(kinds.RESEARCH_TOOLS) == {"read_page"}
    assert "You are a librarian." in lib_request["messages"][0]["content"]
    lib = child(root, "lib")
    assert (lib.kind, lib.tools, lib.max_steps) == ("librarian", ["read_page"], 4)

    check = child(root, "check")
    assert check.kind == "verifier" and check.max_steps == 20  # 99 clipped to the kind's max
    check_request = scripted_llm.requests_for("check task")[0]
    assert "web_search" not in tool_names(check_request)
    assert check_request["messages"][1]["content"].endswith(
        "Your step budget: 20 model calls; the last one writes your report."
    )
    assert "## Unsupported claims" in check_request["messages"][0]["content"]


def write_kind(folder: Path, name: str, front_matter: str, body: str = "Do it.") -> Path:
    path = folder / f"{name}.md"
    path.write_text(f"---\n{textwrap.dedent(front_matter).strip()}\n---\n{body}\n")
    return path


@pytest.mark.parametrize(
    ("front_matter", "error"),
    [
        ("name: bad\ndescription: d\ntools: [web_search]", "field 'steps' must be a mapping"),
        (
            "name: bad\ndescription: d\ntools: [telnet]\nsteps: {min: 1, max: 2, default: 1}",
            "field 'tools' names 'telnet', which is not one of: web_search, read_page",
        ),
        (
            "name: bad\ntools: [web_search]\nsteps: {min: 1, max: 2, default: 1}",
            "field 'description' is required",
        ),
        (
            "name: bad\ndescription: d\ntools: []\nsteps: {min: 3, max: 2, default: 2}",
            "field 'steps' must satisfy 1 <= min <= default <= max",
        ),
        (
            "name: other\ndescription: d\ntools: []\nsteps: {min: 1, max: 2, default: 1}",
            "field 'name' is 'other' but the file is bad.md",
        ),
        ("name: [unclosed", "the front matter is not valid YAML"),
    ],
)
def test_a_malformed_kind_file_is_an_error_naming_the_file_and_the_field(
    tmp_path, front_matter, error
):
    path = write_kind(tmp_path, "bad", front_matter)
    with pytest.raises(kinds.KindError) as raised:
        kinds.load([kinds.BUILT_IN_DIR, tmp_path], {})
    assert str(raised.value).startswith(f"{path}: ")
    assert error in str(raised.value)


def test_startup_refuses_a_bad_kind_file_and_a_tier_without_a_price(settings, tmp_path):
    write_kind(tmp_path, "sloppy", "name: sloppy\ndescription: d\ntools: [web_search]")
    checked = manage_check(settings, RESEARCH_AGENT_KINDS_DIR=str(tmp_path))
    assert checked.returncode != 0
    assert f"{tmp_path / 'sloppy.md'}: field 'steps' must be a mapping" in checked.stderr

    checked = manage_check(settings, RESEARCH_MODEL_TIERS='{"high": "mystery-model"}')
    assert checked.returncode != 0
    assert (
        "RESEARCH_MODEL_TIERS: tier 'high' names model 'mystery-model', which has no price"
        in checked.stderr
    )


# --- batch launch -------------------------------------------------------------------------------


def test_a_batch_with_one_bad_entry_starts_nothing_and_names_the_entry(
    agent_pool, scripted_llm, alice
):
    scripted_llm.script(
        "batch research",
        call(
            "spawn_subagents",
            subagents=[launch("north", "the northern part"), launch("south", "   ")],
        ),
        call(
            "spawn_subagents",
            subagents=[launch("east", "the eastern part"), launch("east", "the western part")],
        ),
        call(
            "spawn_subagents",
            subagents=[launch("east", "the eastern part"), launch("west", "the western part")],
        ),
        # The children work before the root answers, however busy the machine is.
        call("wait_subagents"),
        reply("root"),
    )
    scripted_llm.script("the eastern part", call("list_siblings"), reply("east report"))
    scripted_llm.script("the western part", call("list_siblings"), reply("west report"))
    root = wait_finished(start(alice, "batch research"))
    empty, duplicate, started = results(scripted_llm, "batch research", "spawn_subagents")
    assert (
        empty == 'error: entry 2 ("south"): a task is required: what the sub-agent has to do and '
        "bring back"
    )
    assert duplicate.startswith(
        'error: entry 2 ("east"): you already have a sub-agent named "east" earlier in this batch'
    )
    east = child(root, "east")
    assert started.startswith("started 2 sub-agents:\n")
    assert f'- "east" (run {east.pk}, researcher, scripted, 10 steps)' in started
    assert list(Run.objects.filter(parent=root).values_list("name", flat=True).order_by("id")) == [
        "east",
        "west",
    ]
    # Children of one batch see each other from their first step.
    assert results(scripted_llm, "the eastern part", "list_siblings")[0].startswith("- west [")
    assert results(scripted_llm, "the western part", "list_siblings")[0].startswith("- east [")


def test_a_batch_past_the_per_agent_limit_starts_none_of_it(
    agent_pool, scripted_llm, alice, settings
):
    settings.RESEARCH_MAX_SUBAGENTS_PER_AGENT = 2
    scripted_llm.script(
        "too big batch research",
        call(
            "spawn_subagents",
            subagents=[launch(f"part{i}", f"distinct subject number {i}") for i in range(3)],
        ),
        reply("root"),
    )
    root = wait_finished(start(alice, "too big batch research"))
    (refused,) = results(scripted_llm, "too big batch research", "spawn_subagents")
    assert refused.startswith(
        'error: entry 3 ("part2"): limit reached: an agent may spawn at most 2 sub-agents'
    )
    assert not Run.objects.filter(parent=root).exists()


# --- reports come to the parent, inspect_subagent ------------------------------------------------


def test_a_report_reaches_the_parents_next_round_without_a_wait(agent_pool, scripted_llm, alice):
    def search_once_the_child_is_done(messages):
        wait_for(lambda: Run.objects.filter(name="quick", status="done").exists())
        return call("web_search", query="my own part")

    scripted_llm.script(
        "mailbox research",
        spawn("quick", "quick errand"),
        search_once_the_child_is_done,
        reply("Root report using quick's findings."),
    )
    scripted_llm.script("quick errand", reply("Quick found 42."))
    root = wait_finished(start(alice, "mailbox research"))
    quick = child(root, "quick")
    requests = scripted_llm.requests_for("mailbox research")
    # Three rounds and no wait_subagents: the report came into the third round by itself,
    # once, naming the child, and counted as collected (the root's answer was not refused).
    assert len(requests) == 3
    assert not results(scripted_llm, "mailbox research", "wait_subagents")
    delivered = [
        message["content"]
        for message in requests[2]["messages"]
        if message["role"] == "user" and message["content"].startswith(REPORTS_HEADER)
    ]
    assert delivered == [f"{REPORTS_HEADER}\n\n## quick (run {quick.pk}): done\n\nQuick found 42."]
    assert root.status == "done" and root.report == "Root report using quick's findings."


def test_reports_that_end_close_together_arrive_as_one_message(agent_pool, scripted_llm, alice):
    def after_both_end(messages):
        wait_for(lambda: Run.objects.filter(name__in=["one", "two"], status="done").count() == 2)
        return call("web_search", query="meanwhile")

    scripted_llm.script(
        "two reports research",
        call(
            "spawn_subagents",
            subagents=[launch("one", "first errand"), launch("two", "second errand")],
        ),
        after_both_end,
        reply("root"),
    )
    scripted_llm.script("first errand", reply("first findings"))
    scripted_llm.script("second errand", reply("second findings"))
    wait_finished(start(alice, "two reports research"))
    last = scripted_llm.requests_for("two reports research")[-1]["messages"]
    delivered = [
        m["content"]
        for m in last
        if m["role"] == "user" and m["content"].startswith(REPORTS_HEADER)
    ]
    assert len(delivered) == 1
    assert "## one (run " in delivered[0] and "## two (run " in delivered[0]


def _times_sent(llm, match: str, text: str) -> int:
    """How often `text` is in the conversation the model was last sent for `match` (each
    request carries the whole conversation so far)."""
    last = llm.requests_for(match)[-1]["messages"]
    return sum(str(message.get("content") or "").count(text) for message in last)


def test_a_report_delivered_at_a_rounds_head_is_not_repeated_by_wait_subagents(
    agent_pool, scripted_llm, alice
):
    def search_once_the_child_is_done(messages):
        wait_for(lambda: Run.objects.filter(name="early", status="done").exists())
        return call("web_search", query="my own part")

    scripted_llm.script(
        "early report research",
        spawn("early", "early errand"),
        search_once_the_child_is_done,
        call("wait_subagents"),  # the report came at this round's head already
        reply("root"),
    )
    scripted_llm.script("early errand", reply("Early found the unique fact 4711."))
    root = wait_finished(start(alice, "early report research"))
    assert root.status == "done"
    assert _times_sent(scripted_llm, "early report research", "the unique fact 4711") == 1
    (waited,) = results(scripted_llm, "early report research", "wait_subagents")
    early = child(root, "early")
    assert waited == f"## early (run {early.pk}): done (its report was delivered to you above)"


def test_a_report_collected_by_wait_subagents_is_not_delivered_again(
    agent_pool, scripted_llm, alice
):
    scripted_llm.script(
        "waited report research",
        spawn("late", "late errand"),
        call("wait_subagents"),
        call("web_search", query="after the wait"),
        reply("root"),
    )
    scripted_llm.script("late errand", slow(0.5, reply("Late found the unique fact 1234.")))
    root = wait_finished(start(alice, "waited report research"))
    assert root.status == "done"
    assert _times_sent(scripted_llm, "waited report research", "the unique fact 1234") == 1
    (waited,) = results(scripted_llm, "waited report research", "wait_subagents")
    assert waited.endswith("Late found the unique fact 1234.")


def test_inspect_subagent_pages_a_running_childs_transcript(agent_pool, scripted_llm, alice):
    release = threading.Event()

    def busy_until_released(messages):
        release.wait(20)
        return reply("busy report")

    def inspect_when_busy(name, **paging):
        def turn(messages):
            # Five tool calls and six model turns are in the child's transcript by then.
            wait_for(lambda: child_steps("busy") >= 11)
            return call("inspect_subagent", name=name, **paging)

        return turn

    def release_child(messages):
        release.set()
        return call("wait_subagents")

    scripted_llm.script(
        "inspecting research",
        spawn("busy", "busy errand"),
        inspect_when_busy("busy", last=4),
        inspect_when_busy("busy", last=4, offset=4),
        call("inspect_subagent", name="nobody"),
        release_child,
        reply("root"),
    )
    scripted_llm.script(
        "busy errand",
        *[call("web_search", query=f"query number {i}") for i in range(5)],
        busy_until_released,
    )
    root = wait_finished(start(alice, "inspecting research"))
    busy = child(root, "busy")
    newest, older, unknown = results(scripted_llm, "inspecting research", "inspect_subagent")
    lines = newest.splitlines()
    assert lines[0] == f"## busy (run {busy.pk}): working, thinking"
    assert lines[1].startswith("researcher, scripted; steps 5 of 10; ")
    assert lines[1].endswith(" s elapsed")
    assert lines[2] == "Transcript entries 7-10 of 10:"
    assert lines[3].startswith('[7] model: calls web_search {"query": "query number 3"}')
    assert lines[4].startswith('[8] web_search {"query": "query number 3"} -> ')
    assert lines[6].startswith('[10] web_search {"query": "query number 4"} -> ')
    assert lines[-1] == "Older entries: call inspect_subagent with offset=4."
    assert older.splitlines()[2] == "Transcript entries 3-6 of 10:"
    assert unknown == "error: no sub-agent named 'nobody'; your sub-agents are: busy"


def child_steps(name: str) -> int:
    run = Run.objects.filter(name=name).first()
    return 0 if run is None else run.transcript.count() + 1


# --- working places and deadlines -----------------------------------------------------------------


def test_children_beyond_the_cap_wait_for_a_slot_and_a_waiting_child_gives_its_place_back(
    agent_pool, scripted_llm, alice, settings
):
    settings.RESEARCH_MAX_WORKING_CHILDREN = 1
    scripted_llm.script(
        "one at a time research",
        call(
            "spawn_subagents",
            subagents=[launch("listener", "listening errand"), launch("talker", "talking errand")],
        ),
        call("wait_subagents"),
        reply("root"),
    )
    # The listener waits for a message; only the talker can send it, and the talker can only
    # work once the listener has given its place back for the wait.
    scripted_llm.script(
        "listening errand", call("read_messages", wait_seconds=15), reply("listener report")
    )
    scripted_llm.script(
        "talking errand",
        call("send_message", to="listener", text="here is the fact you need"),
        reply("talker report"),
    )
    root = wait_finished(start(alice, "one at a time research"), timeout=30)
    (heard,) = results(scripted_llm, "listening errand", "read_messages")
    assert heard.endswith(": here is the fact you need")
    talker = child(root, "talker")
    assert talker.status == "done"
    assert RunState.objects.filter(run=talker, state="queued", detail="waiting for a slot").exists()


def test_a_child_queued_past_its_deadline_ends_without_a_model_call(
    agent_pool, scripted_llm, alice, settings
):
    settings.RESEARCH_MAX_WORKING_CHILDREN = 1
    settings.RESEARCH_ROOT_TIMEOUT_SECONDS = 6
    settings.RESEARCH_WRITING_RESERVE_SECONDS = 4  # children get 2 s from the root's start

    def hold_the_slot(messages):
        if not messages[-1]["content"].startswith("Your step budget is spent"):
            return slow(0.1, call("list_siblings"))
        return slow(1.5, reply("First report, written past the second's deadline."))

    scripted_llm.script(
        "deadline research",
        call(
            "spawn_subagents",
            subagents=[
                launch("first", "first long errand", max_steps=40),
                launch("second", "second errand"),
            ],
        ),
        call("wait_subagents"),
        reply("Root report written in the reserve."),
    )
    scripted_llm.script("first long errand", *[hold_the_slot] * 40)
    scripted_llm.script("second errand", reply("never asked"))
    root = wait_finished(start(alice, "deadline research"), timeout=30)
    first, second = child(root, "first"), child(root, "second")
    # The first wrote its report in its own reserve, holding the only place meanwhile.
    assert (first.status, first.report) == (
        "done",
        "First report, written past the second's deadline.",
    )
    assert (second.status, second.started_at) == ("failed", None)
    assert second.error == (
        "out of time: its deadline passed while it waited for a slot, before it started"
    )
    assert scripted_llm.requests_for("second errand") == []
    # The root wrote its report in the time it kept for writing.
    assert root.status == "done" and root.report == "Root report written in the reserve."
    final = scripted_llm.requests_for("deadline research")[-1]["messages"][-1]["content"]
    assert "the research's time is nearly up" in final


def test_a_child_at_the_roots_deadline_writes_its_report_in_its_own_reserve(
    agent_pool, scripted_llm, alice, settings
):
    settings.RESEARCH_ROOT_TIMEOUT_SECONDS = 8
    settings.RESEARCH_WRITING_RESERVE_SECONDS = 3  # the child's deadline: 5 s from the start

    def research_until_told_to_write(messages):
        if "your time is nearly up" in str(messages[-1].get("content")):
            return reply("Child report written in its reserve.")
        return slow(0.3, call("list_siblings"))

    scripted_llm.script(
        "reserve research",
        spawn("digger", "digging errand", max_steps=40),
        call("wait_subagents"),
        reply("Root report from the child's findings."),
    )
    scripted_llm.script("digging errand", *[research_until_told_to_write] * 40)
    root = wait_finished(start(alice, "reserve research"), timeout=30)
    digger = child(root, "digger")
    assert (digger.status, digger.report) == ("done", "Child report written in its reserve.")
    (waited,) = results(scripted_llm, "reserve research", "wait_subagents")
    assert waited.endswith("Child report written in its reserve.")
    # The child ended before its deadline, so the root still had time for its own report.
    assert root.status == "done" and root.report == "Root report from the child's findings."


def test_a_grandchild_ends_in_time_for_its_parent_to_write_its_own_report(
    agent_pool, scripted_llm, alice, settings
):
    settings.RESEARCH_ROOT_TIMEOUT_SECONDS = 10
    settings.RESEARCH_WRITING_RESERVE_SECONDS = 3  # the middle agent's deadline: 7 s

    def research_until_told_to_write(report: str):
        def turn(messages):
            if "your time is nearly up" in str(messages[-1].get("content")):
                return reply(report)
            return slow(0.3, call("web_search", query="more"))

        return turn

    scripted_llm.script(
        "three deadlines research",
        spawn("mid", "middle errand", max_steps=40),
        call("wait_subagents"),
        reply("Root report."),
    )
    scripted_llm.script(
        "middle errand",
        spawn("leaf", "leaf errand", max_steps=40),
        call("wait_subagents"),
        *[research_until_told_to_write("Mid report, after the leaf's.")] * 30,
    )
    scripted_llm.script("leaf errand", *[research_until_told_to_write("Leaf report.")] * 40)
    root = wait_finished(start(alice, "three deadlines research"), timeout=30)
    mid = child(root, "mid")
    leaf = Run.objects.get(parent=mid)
    # The leaf wrote in its reserve and ended before the middle agent's own reserve began;
    # the middle agent then wrote its report in its reserve, and the root in its own.
    assert (leaf.status, leaf.report) == ("done", "Leaf report.")
    assert (mid.status, mid.report) == ("done", "Mid report, after the leaf's.")
    assert root.status == "done" and root.report == "Root report."


def test_run_finished_carries_duration_tool_calls_and_tokens(agent_pool, scripted_llm, alice):
    scripted_llm.script(
        "delegation stats research",
        spawn("worker", "stats errand"),
        call("wait_subagents"),
        reply("r"),
    )
    scripted_llm.script(
        "stats errand", call("web_search", query="a"), call("web_search", query="b"), reply("done")
    )
    root = wait_finished(start(alice, "delegation stats research"))
    worker = child(root, "worker")
    finished = Event.objects.get(root=root, type="run.finished", payload__run=worker.pk).payload
    assert finished["tool_calls"] == 2
    assert (finished["input_tokens"], finished["output_tokens"]) == (300, 60)
    assert 0 < finished["duration_seconds"] < 20


def test_a_grandchild_gets_only_tools_its_whole_lineage_has(agent_pool, scripted_llm, alice):
    # The root has web_search and read_page; a verifier child only read_page; the child's
    # own researcher child gets read_page alone, though its kind lists web_search too.
    scripted_llm.script(
        "lineage research",
        spawn("checker", "lineage check task", kind="verifier"),
        call("wait_subagents"),
        reply("root"),
    )
    scripted_llm.script(
        "lineage check task",
        spawn("digger", "lineage dig task"),
        call("wait_subagents"),
        reply("checker report"),
    )
    scripted_llm.script("lineage dig task", reply("digger report"))
    wait_finished(start(alice, "lineage research"))
    research = set(kinds.RESEARCH_TOOLS)
    assert tool_names(scripted_llm.requests_for("lineage check task")[0]) & research == {
        "read_page"
    }
    assert tool_names(scripted_llm.requests_for("lineage dig task")[0]) & research == {"read_page"}
    assert Run.objects.get(name="digger").tools == ["read_page"]


def test_another_users_research_starts_while_children_wait_for_their_parents_places(
    agent_pool, scripted_llm, alice, bob, settings
):
    settings.RESEARCH_MAX_WORKING_CHILDREN = 1
    release = threading.Event()

    def held(messages):
        release.wait(30)
        return reply("held report")

    scripted_llm.script(
        "crowded research",
        call(
            "spawn_subagents",
            subagents=[launch(f"c{i}", f"crowded errand number {i}") for i in range(3)],
        ),
        call("wait_subagents"),
        reply("root"),
    )
    for i in range(3):
        scripted_llm.script(f"crowded errand number {i}", held)
    crowded = start(alice, "crowded research")
    wait_for(
        lambda: (
            RunState.objects.filter(run__parent=crowded, detail="waiting for a slot").count() == 2
        )
    )
    scripted_llm.script("bob's quick research", reply("quick"))
    # Two children wait for their parent's place: the pool must still take bob's root.
    quick = wait_finished(start(bob, "bob's quick research"), timeout=15)
    release.set()
    assert quick.status == "done"
    wait_finished(crowded, timeout=30)


def test_a_writing_reserve_not_below_the_root_cap_stops_startup(settings):
    checked = manage_check(
        settings, RESEARCH_ROOT_TIMEOUT_SECONDS="300", RESEARCH_WRITING_RESERVE_SECONDS="600"
    )
    assert checked.returncode != 0
    assert (
        "RESEARCH_WRITING_RESERVE_SECONDS (600) must be less than RESEARCH_ROOT_TIMEOUT_SECONDS "
        "(300)" in checked.stderr
    )
