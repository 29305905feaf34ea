"""The offline demo model: the whole product working with no API key, on real documents."""

import json

import pytest

from research import services
from research.models import Citation, Dataset, Message, Run
from research.selectors import plans as plan_reads
from research.services.datasets import dataset_create, document_add
from tests.conftest import demo_on_starter, wait_finished, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CHEMISTRY = b"""# EV battery chemistries

Lithium iron phosphate (LFP) cells now power most new electric cars sold in China, because
they cost less per kWh and last longer, at a lower energy density than NMC.

Nickel manganese cobalt (NMC) chemistries keep the lead in energy density, which matters for
long-range vehicles; sodium-ion cells are coming for the cheapest models.
"""

MARKET = b"""# EV battery market

CATL is the largest maker of electric-vehicle batteries, with more than a third of the market;
BYD is second, and LG Energy Solution third.

The market for EV batteries grew by about a quarter last year, led by China and Europe.
"""


@pytest.fixture
def ev_dataset(alice) -> Dataset:
    dataset = dataset_create(owner=alice, name="EV notes")
    document_add(dataset=dataset, title="Chemistries", data=CHEMISTRY, filename="chem.md")
    document_add(dataset=dataset, title="Market", data=MARKET, filename="market.md")
    return dataset


def test_seed_example_runs_end_to_end_on_the_demo_model(
    agent_pool, alice, ev_dataset, admin_client
):
    root = services.run_start(
        owner=alice,
        topic="EV batteries: chemistry and market",
        model="demo",
        dataset_id=ev_dataset.pk,
    )
    root = wait_finished(root, timeout=30)

    assert root.status == "done", root.error
    chemistry = Run.objects.get(parent=root, name="chemistry")
    market = Run.objects.get(parent=root, name="market")
    assert chemistry.status == market.status == "done"
    assert (chemistry.model, chemistry.dataset_id) == ("demo", ev_dataset.pk)
    # One batch launch of two researchers, the budget the demo asked for.
    assert (chemistry.kind, market.kind, chemistry.max_steps) == ("researcher", "researcher", 6)
    # The lead writes its plan, then launches one researcher per item in one batch.
    plan_step, spawn_step = root.transcript.filter(kind="model").order_by("id")[:2]
    assert [name for name, _ in plan_step.input["tool_calls"]] == ["write_plan"]
    assert [name for name, _ in spawn_step.input["tool_calls"]] == ["spawn_subagents"]
    assert root.plans.get().items == [chemistry.plan_item, market.plan_item]
    assert root.report.endswith("## Coverage and gaps\n\nEvery item of the plan (2) was covered.")
    message = Message.objects.get()
    assert (message.from_run, message.to_run) == (chemistry, market)
    assert "kb://dataset/" in message.text
    # The report quotes the documents and cites them; every citation was seen by the tree.
    assert "offline demo model" in root.report
    assert "CATL is the largest maker of electric-vehicle batteries" in market.report
    assert "CATL is the largest maker of electric-vehicle batteries" in root.report
    assert "## Sources" in root.report and "kb://dataset/" in root.report
    citations = Citation.objects.filter(run=root)
    assert citations.exists() and all(c.verified for c in citations)
    assert root.cost_usd == 0 and root.steps > 0

    page = admin_client.get(f"/admin/research/run/{root.pk}/change/")
    assert page.status_code == 200
    assert b"chemistry" in page.content and b"market" in page.content


def test_the_demo_plays_the_verifier_too_so_make_run_shows_a_checked_report(
    agent_pool, alice, ev_dataset, settings
):
    settings.RESEARCH_VERIFY_REPORTS = True  # the default of `make run`
    root = services.run_start(
        owner=alice,
        topic="EV batteries: chemistry and market",
        model="demo",
        dataset_id=ev_dataset.pk,
    )
    root = wait_finished(root, timeout=40)

    assert root.status == "done", root.error
    verifier = Run.objects.get(parent=root, kind="verifier")
    assert (verifier.name, verifier.status) == ("verifier", "done")
    # Every claim of the demo's report quotes a passage an agent read: nothing is flagged.
    assert verifier.report.startswith("## Unsupported claims\nNone.")
    assert root.flagged_claims == []
    cited = Citation.objects.filter(run=root).count()
    assert cited >= 2
    assert root.report.endswith(
        "## Coverage and gaps\n\nEvery item of the plan (2) was covered.\n\n"
        f"The verifier checked the claims against the {cited} sources the report cites and "
        "found none unsupported."
    )


def test_an_item_the_analyst_adds_in_review_is_researched_and_covered_by_its_own_agent(
    agent_pool, alice, ev_dataset
):
    root = services.run_start(
        owner=alice,
        topic="EV batteries: chemistry and market",
        model="demo",
        dataset_id=ev_dataset.pk,
        review_plan=True,
    )
    wait_for(lambda: Run.objects.get(pk=root.pk).status == "paused", timeout=20)
    written = services.current_plan(root_id=root.pk).items
    edited = [*written, "Battery recycling in Europe"]

    services.plan_approve(run=Run.objects.get(pk=root.pk), items=edited)
    root = wait_finished(root, timeout=40)

    assert root.status == "done", root.error
    items = plan_reads.plan_items(root=root)
    assert [item["text"] for item in items] == edited
    assert [item["status"] for item in items] == ["covered", "covered", "covered"]
    added = Run.objects.get(parent=root, plan_item="Battery recycling in Europe")
    assert added.status == "done" and "Battery recycling in Europe" in added.topic
    assert items[2]["agents"] == [{"id": added.pk, "name": added.name, "status": "done"}]
    # Each sub-agent's task is the item it covers, as approved.
    for child in Run.objects.filter(parent=root, kind="researcher"):
        assert child.plan_item in edited and child.plan_item in child.topic


def test_a_one_item_plan_the_lead_researched_itself_is_covered_by_the_lead(
    agent_pool, alice, ev_dataset
):
    root = services.run_start(
        owner=alice, topic="Why LFP cells last longer", model="demo", dataset_id=ev_dataset.pk
    )
    root = wait_finished(root, timeout=30)

    assert root.status == "done", root.error
    assert not Run.objects.filter(parent=root).exists()
    [item] = plan_reads.plan_items(root=root)
    assert item["status"] == "covered"
    assert item["agents"] == [{"id": root.pk, "name": "root", "status": "done"}]


def test_a_long_address_in_the_topic_is_one_source_never_a_cut_copy(agent_pool, alice):
    """The demo's report heading cut the topic at 200 characters, inside a pasted address:
    the cut copy was cited as a second source, flagged."""
    address = "https://example.org/" + "tides/" * 50 + "spring"
    topic = f"What does this page say about spring and neap tides: {address} and why?"
    root = services.run_start(owner=alice, topic=topic, model="demo")
    root = wait_finished(root, timeout=30)

    assert root.status == "done", root.error
    heading = root.report.splitlines()[0]
    assert heading == "# What does this page say about spring and neap tides: …"  # whole words
    cited = [c.url for c in Citation.objects.filter(run=root) if c.url.startswith("https://ex")]
    assert all(url == address for url in cited), cited  # no cut copy


def test_demo_answers_the_python_question_from_the_starter_dataset(agent_pool, alice):
    root = demo_on_starter(alice, "How do Python's context managers and exceptions interact?")
    root = wait_finished(root, timeout=30)
    assert root.status == "done", root.error
    names = sorted(Run.objects.filter(parent=root).values_list("name", flat=True))
    assert names == ["context", "exceptions"]
    # The context-manager passage of the reference is quoted, and cited with its address
    # (its own "*" escaped: the quote shows as the reference writes it, not as emphasis).
    assert "context manager\\* is an object that defines the runtime context" in root.report
    # Named by the document's heading, as every page names it, not its file's "context-managers".
    assert "— [With Statement Context Managers](kb://dataset/" in root.report
    assert root.report.count("kb://dataset/") >= 2


def test_a_demo_report_quotes_the_prose_passages_it_found_not_a_tables_rows():
    """On a topic the starter dataset barely covers (`make run`'s first research is whatever
    the analyst types), the passages found include tables of the Python reference, which
    the demo quoted as rows of pipes. It quotes the first three passages that hold prose,
    and cites only those."""

    table = (
        '| "None" or a tuple of cells that | Read-only | | | contain bindings for the | | | | '
        "function's free variables. See | | | | below for information on the | | | |"
    )
    prose = [
        f"The {word} passage says something about the tides in plain words."
        for word in ("first", "second", "third", "fourth")
    ]
    hits = [("Data model", "kb://dataset/1/doc/1", table)] + [
        (f"Doc {n}", f"kb://dataset/1/doc/{n}", text) for n, text in enumerate(prose, start=2)
    ]
    report = report_on_hits("How do tides work?", hits)

    quotes = [line for line in report.splitlines() if line.startswith("> ") and "—" not in line]
    assert quotes == [f"> {text}" for text in prose[:3]]
    assert "kb://dataset/1/doc/1)" not in report  # the table is neither quoted nor cited
    assert report.count("kb://dataset/1/doc/") == 6  # three quotes, three sources


def test_a_demo_reports_sources_name_two_passages_of_one_document_apart():
    """Two passages of "The standard type hierarchy" were listed as two identical sources
    in `make run`'s first report: each is named by its passage."""

    hits = [
        ("Data model", "kb://dataset/1/document/7#2", "Objects are Python's abstraction for data."),
        ("Expressions", "kb://dataset/1/document/9#0", "An expression is evaluated left to right."),
        ("Data model", "kb://dataset/1/document/7#5", "Every object has an identity and a type."),
    ]
    report = report_on_hits("What is an object?", hits)

    assert report.split("## Sources\n\n")[1].splitlines() == [
        "- [Data model, passage 3](kb://dataset/1/document/7#2)",
        "- [Expressions](kb://dataset/1/document/9#0)",
        "- [Data model, passage 6](kb://dataset/1/document/7#5)",
    ]


def test_a_topic_with_python_names_is_shown_as_written_not_as_markup():
    """A report on "How does __init__ differ from __new__?" was headed "How does
    <strong>init</strong> differ…": the demo put the topic into its Markdown as it was."""
    from frontend.rendering import render_report_page

    topic = "How does __init__ differ from __new__ in *Python* [classes]?"
    passage = "A function may take *args and **kwargs as its last parameters."
    report = report_on_hits(topic, [("data_model", "kb://dataset/1/document/7#2", passage)])

    html = render_report_page(report, [], []).html
    assert "How does __init__ differ from __new__ in *Python* [classes]?</h1>" in html
    assert "<blockquote>\n<p>A function may take *args and **kwargs as its last" in html
    assert "— <a" in html and ">data_model</a>" in html  # the quote's source, still a link
    assert "<strong>" not in html and "<em>args" not in html


def report_on_hits(topic: str, hits: list[tuple[str, str, str]]) -> str:
    """The demo's report on `topic` after one query that found `hits` (title, address, text),
    in the query tool's words."""
    from agents.llm.demo import DemoModel

    result = "\n\n".join(
        f"[{n}] {title} ({url})\n{text}" for n, (title, url, text) in enumerate(hits, 1)
    )
    call = {"id": "q1", "type": "function", "function": {"name": "query", "arguments": "{}"}}
    messages = [
        {"role": "system", "content": "You research."},
        {"role": "user", "content": topic},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "q1", "content": result},
    ]
    return DemoModel().chat(model="demo", messages=messages, tools=[]).content


def test_a_demo_run_started_without_a_dataset_reads_the_owners_starter_one(api_for, bob):
    """Datasets are owned: a user who never loaded the starter dataset gets their own copy
    on their first demo run, so the demo works for every account, not just the first."""
    response = api_for(bob).post(
        "/v1/gb/research",
        {"topic": "What does the with statement do?", "model": "demo"},
        format="json",
    )
    assert response.status_code == 201
    run = Run.objects.get(pk=response.json()["id"])
    assert (run.dataset.name, run.dataset.owner) == ("Python reference", bob)
    assert run.dataset.documents.filter(title="with").exists()


@pytest.mark.parametrize(
    ("text", "quote"),
    [
        (
            "TARGET: SUITE is equivalent to: manager = (EXPRESSION) enter = type(manager). "
            "The with statement wraps the execution of a block with a context manager.",
            "The with statement wraps the execution of a block with a context manager.",
        ),
        (
            "With Statement Context Managers ****************** A context manager is an "
            "object that defines the runtime context of a with statement.",
            "A context manager is an object that defines the runtime context of a with statement.",
        ),
        (
            '| "None" or a tuple of cells that | Read-only | | | contain bindings for the | | | | '
            "function's free variables. See | | | | below for information on the | | | |",
            "",
        ),
        (  # an uploaded Markdown file's heading was glued to its first sentence
            "# Tea Notes\n\nGreen tea is made from leaves that are steamed or pan-fired.",
            "Green tea is made from leaves that are steamed or pan-fired.",
        ),
    ],
)
def test_the_demo_quotes_prose_not_code_or_headings(text, quote):
    from agents.llm.demo import first_sentence

    assert first_sentence(text) == quote


def test_the_demos_plan_is_split_from_the_topic_never_from_the_analysts_answers():
    """`make run`'s first research asks its questions, and an answer such as "The ocean
    tides on Earth, for a general audience" was cut at its comma into two plan items,
    "tides work? (The ocean tides on Earth" and "for a general audience)"."""
    from agents.llm.demo import DemoModel
    from research.services.clarify import clarified_task

    def planned(topic: str, answer: str) -> list[str]:
        clarification = {
            "questions": ["Which part should the research cover?"],
            "answers": [answer],
        }
        task = clarified_task(topic=topic, clarification=clarification)
        tools = [{"type": "function", "function": {"name": "write_plan", "parameters": {}}}]
        messages = [
            {"role": "system", "content": "You research."},
            {"role": "user", "content": task},
        ]
        [call] = DemoModel().chat(model="demo", messages=messages, tools=tools).tool_calls
        return json.loads(call.arguments)["items"]

    answer = "The ocean tides on Earth, for a general audience"
    assert planned("How do tides work?", answer) == [f"How do tides work? ({answer})"]
    assert planned("EV batteries: chemistry and market", answer) == [
        "chemistry (EV batteries)",
        "market (EV batteries)",
    ]


def test_the_demo_verifier_names_a_sub_agent_that_found_nothing_as_a_gap():
    """A researcher of the demo that found no passage for its part was reported "Gaps: None."
    by the demo's verifier: its part of the draft quotes no source."""
    from agents.llm.demo_verifier import verify_draft

    draft = (
        "# Draft\n\n# Tides\n\n## Findings\n\n> The moon pulls.\n>\n> — [Moon](kb://dataset/1/document/2#0)"
        "\n\n## From the sub-agents\n\n### moon (done)\n\n> The moon pulls.\n>\n"
        "> — [Moon](kb://dataset/1/document/2#0)\n\n### spring (done)\n\n"
        "> No passage of the knowledge base matches 'Spring and neap tides'.\n\n## Sources\n\n"
        "- [Moon](kb://dataset/1/document/2#0)\n\n# Sources it cites\n\n- kb://dataset/1/document/2#0"
    )
    verdict = verify_draft(draft)
    assert verdict.endswith("## Gaps\n- spring found no source for its part.")


def test_a_wait_that_found_no_sub_agent_draws_no_empty_section():
    """A research whose spawns were all refused waited anyway, and its report had a "From
    the sub-agents" heading, in its contents too, with nothing under it."""
    from agents.llm.demo import DemoModel

    calls = [
        {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}
        for n, name in enumerate(("query", "wait_subagents"))
    ]
    messages = [
        {"role": "system", "content": "You research."},
        {"role": "user", "content": "How do tides work?"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {
            "role": "tool",
            "tool_call_id": "c0",
            "content": "[1] Tides (kb://dataset/1/doc/1)\n"
            "The moon pulls the sea into two bulges that the earth turns under.",
        },
        {"role": "tool", "tool_call_id": "c1", "content": "You have no sub-agents."},
    ]
    report = DemoModel().chat(model="demo", messages=messages, tools=[]).content
    assert "From the sub-agents" not in report
    assert "The moon pulls the sea into two bulges" in report
