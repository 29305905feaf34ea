"""The offline demo model: a deterministic policy behind the chat interface (model `demo`).

It exists so that a machine with no API key shows the whole product working, on real
documents: it plans facets of the topic, spawns sub-agents for them, queries the knowledge
base, messages a sibling, and writes an extractive report that quotes and cites what its tools
returned. It reads only the conversation, like a real model, and decides the next step from
the tools it has and the calls it already made. Every page that shows a demo run says so.
"""

import json
import re
from itertools import count
from typing import Any

from agents.llm.base import ChatResponse, ToolCall
from agents.llm.demo_followup import earlier_section, split_task
from agents.llm.demo_verifier import CITED, verify_draft
from agents.loop.calls import SPAWNS
from research.fulltext import source_names
from research.markdown import ADDRESS, literal
from research.services.clarify import ANSWERS_HEAD
from research.text import STOP_WORDS

_ids = count(1)
URL = ADDRESS  # an address in a text, as research.markdown.literal leaves it whole
QUESTION_WORDS = re.compile(
    r"^(?:(?:how|what|why|when|where|which|who|do|does|did|is|are|can|should)\b\s*)+", re.I
)


CLARIFIED = ANSWERS_HEAD  # where a lead's task lists the analyst's answers
# The demo's rule for asking before it starts: a topic of fewer than five words is ambiguous.
CLARIFY_UNDER_WORDS = 5


class DemoModel:
    def chat(
        self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ChatResponse:
        conversation = Conversation(messages)
        available = {tool["function"]["name"] for tool in tools}
        turn = Policy(conversation, available).next_turn()
        turn.input_tokens = sum(len(str(m.get("content") or "")) for m in messages) // 4
        turn.output_tokens = (
            len(turn.content) + sum(len(c.arguments) for c in turn.tool_calls)
        ) // 4
        return turn


class Conversation:
    """What the model can see: the task, the calls it made, the results it got."""

    def __init__(self, messages: list[dict[str, Any]]):
        task = next(m["content"] for m in messages if m["role"] == "user")
        # A sub-agent's task ends with its step budget (agents.loop.instructions.task_message);
        # a lead's, with the analyst's answers to its questions, which then narrow its topic,
        # and a follow-up's lead's, with the research it follows.
        task, self.earlier = split_task(task.split("\n\nYour step budget:")[0])
        task, _, answered = task.partition(CLARIFIED)
        answers = re.findall(r"^  Answer: (.+)$", answered, re.M)
        # The facets of a plan come from the topic alone: an answer's commas split no item.
        self.topic = task
        self.task = f"{task} ({'; '.join(answers)})" if answers else task
        self.system = next((m["content"] for m in messages if m["role"] == "system"), "")
        self.calls: list[tuple[str, dict]] = []
        self.results: dict[str, list[str]] = {}
        names_by_id = {}
        for message in messages:
            for call in message.get("tool_calls") or []:
                function = call["function"]
                names_by_id[call["id"]] = function["name"]
                self.calls.append((function["name"], _arguments(function["arguments"])))
            if message["role"] == "tool":
                name = names_by_id.get(message["tool_call_id"], "")
                self.results.setdefault(name, []).append(message["content"] or "")
        found = re.search(r'You are the sub-agent "([\w-]+)"', self.system)
        self.name = found.group(1) if found else ""
        self.refused = any(
            m["role"] == "user" and "not accepted yet" in (m["content"] or "") for m in messages
        )
        # A root resumed after the analyst's review: its plan is the approved one.
        approved = next(
            (
                m["content"]
                for m in messages
                if m["role"] == "user" and (m["content"] or "").startswith("The analyst approved")
            ),
            "",
        )
        self.approved_plan = re.findall(r"^\d+\. (.+)$", approved, re.M)
        self.is_verifier = "You are a verifier." in self.system

    def called(self, *names: str) -> int:
        return sum(1 for called, _ in self.calls if called in names)


def _arguments(text: str) -> dict:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class Policy:
    def __init__(self, conversation: Conversation, tools: set[str]):
        self.c = conversation
        self.tools = tools

    def next_turn(self) -> ChatResponse:
        if self.c.is_verifier:
            return ChatResponse(content=verify_draft(self.c.task))
        for step in (
            self._clarify,
            self._plan,
            self._spawn,
            self._query,
            self._siblings,
            self._message,
            self._wait,
        ):
            turn = step()
            if turn is not None:
                return turn
        return ChatResponse(content=self._report())

    # Each step returns a turn, or None when it does not apply (any more).

    def _clarify(self) -> ChatResponse | None:
        """Offered the question tool (a research started with `clarify`), the lead asks when
        the topic has fewer than five words: too short to tell what the analyst wants."""
        if "ask_clarifying_questions" not in self.tools or self.c.calls:
            return None
        if len(re.findall(r"\w+", self.c.task)) >= CLARIFY_UNDER_WORDS:
            return None
        topic = self.c.task.strip().rstrip("?.!")[:120]
        questions = [
            f"Which part of “{topic}” should the research cover?",
            "Who is the report for, and what will they use it for?",
            "Is there a period, place or kind of source to focus on?",
        ]
        return _calls(("ask_clarifying_questions", {"questions": questions}))

    def _plan(self) -> ChatResponse | None:
        """The lead writes its plan first: one item per facet of the topic (seed 001)."""
        if "write_plan" not in self.tools or self.c.called("write_plan") or self.c.approved_plan:
            return None
        facets = plan_facets(self.c.topic)
        items = [facet for _, facet in facets] if len(facets) >= 2 else [focus_of(self.c.task)]
        return _calls(("write_plan", {"items": [item[:200] for item in items]}))

    def _spawn(self) -> ChatResponse | None:
        # Only the lead splits the work: a sub-agent's task is already one facet.
        if self.c.name or self.c.called(*SPAWNS) or not self.tools & SPAWNS:
            return None
        facets = self._facets()
        if len(facets) < 2:
            return None
        launches = [
            {
                "name": name,
                "reason": f"{facet} needs a search of its own, apart from the rest",
                "task": f"Research {facet}, quoting what matters with its sources.",
                "kind": "researcher",
                "max_steps": 6,
            }
            for name, facet in facets
        ]
        if self.c.called("write_plan") or self.c.approved_plan:  # one researcher per item
            for number, launch in enumerate(launches, start=1):
                launch["plan_item"] = number
        if "spawn_subagents" in self.tools:  # one batch: all start, or none
            return _calls(("spawn_subagents", {"subagents": launches}))
        return _calls(*[("spawn_subagent", launch) for launch in launches])

    def _facets(self) -> list[tuple[str, str]]:
        """What the lead splits its work into: the plan the analyst approved, item by item
        (an item the analyst added or reworded is researched as they wrote it), else the
        facets of the topic."""
        if not self.c.approved_plan:
            return plan_facets(self.c.topic)
        facets: list[tuple[str, str]] = []
        for item in self.c.approved_plan:
            words = [w for w in re.findall(r"[a-z0-9]+", item.lower()) if w not in STOPWORDS]
            name = (words[0] if words else "item")[:36]
            while any(name == taken for taken, _ in facets):
                name = f"{name}-{len(facets) + 1}"
            facets.append((name, item))
        return facets[:10]

    def _query(self) -> ChatResponse | None:
        if "query" in self.tools and not self.c.called("query"):
            return _calls(("query", {"question": focus_of(self.c.task)}))
        web_only = "query" not in self.tools and "web_search" in self.tools
        if web_only and not self.c.called("web_search"):
            return _calls(("web_search", {"query": focus_of(self.c.task)}))
        return None

    def _siblings(self) -> ChatResponse | None:
        if "list_siblings" in self.tools and not self.c.called("list_siblings"):
            return _calls(("list_siblings", {}))
        return None

    def _message(self) -> ChatResponse | None:
        if "send_message" not in self.tools or self.c.called("send_message"):
            return None
        listing = "\n".join(self.c.results.get("list_siblings", []))
        # One message per pair of siblings: the one whose name sorts first writes.
        siblings = [
            name
            for name in re.findall(r"^- ([\w-]+) \[working\]", listing, re.M)
            if name > self.c.name
        ]
        if not siblings:
            return None
        found = (
            (first_sentence(hit.group("text")), hit.group("url"))
            for result in self.c.results.get("query", [])
            for hit in HIT.finditer(result)
        )
        finding, url = next(((text, url) for text, url in found if text), ("", ""))
        if not finding:
            return None
        text = f"A finding that may help your part: {finding[:300]} (source: {url})"
        return _calls(("send_message", {"to": siblings[0], "text": text}))

    def _wait(self) -> ChatResponse | None:
        if "wait_subagents" in self.tools and self.c.called(*SPAWNS):
            pending = "still working" in (self.c.results.get("wait_subagents") or [""])[-1]
            if not self.c.called("wait_subagents") or pending or self.c.refused:
                return _calls(("wait_subagents", {}))
        if "read_messages" in self.tools and not self.c.called("read_messages"):
            return _calls(("read_messages", {"wait_seconds": 3}))
        return None

    def _report(self) -> str:
        return extractive_report(self.c)


def _calls(*calls: tuple[str, dict]) -> ChatResponse:
    return ChatResponse(
        content="",
        tool_calls=[
            ToolCall(id=f"demo_{next(_ids)}", name=name, arguments=json.dumps(arguments))
            for name, arguments in calls
        ],
    )


def focus_of(task: str) -> str:
    """The question inside a sub-agent's task, or the task itself."""
    match = re.search(r"^Research (.+?), quoting what matters", task)
    return (match.group(1) if match else task).strip()[:300]


def plan_facets(topic: str) -> list[tuple[str, str]]:
    """Split a topic into independent facets, each named by its first telling word:
    "EV batteries: chemistry and market" gives ("chemistry", ...) and ("market", ...)."""
    text = QUESTION_WORDS.sub("", topic.strip().rstrip("?.!")).strip()
    context, _, rest = text.rpartition(":")
    parts = re.split(r",\s*|\s+and\s+|\s+vs\.?\s+|\s+versus\s+", rest)
    facets: list[tuple[str, str]] = []
    for part in (p.strip() for p in parts):
        words = [w for w in re.findall(r"[a-z0-9]+", part.lower()) if w not in STOPWORDS]
        if not words or any(name == words[0] for name, _ in facets):
            continue
        facet = f"{part} ({context.strip()})" if context.strip() else part
        facets.append((words[0][:40], facet))
    return facets[:3]


# "python" tells nothing in the starter dataset, where every topic is about Python.
STOPWORDS = STOP_WORDS | {"python"}


def first_sentence(text: str) -> str:
    """The first sentence that reads as prose: code, headings, tables and grammar rules are
    skipped. Empty when none does (a passage that is all table or code is not quoted)."""
    text = re.sub(r"[*=~^-]{3,}", ". ", URL.sub("", text))  # heading underlines end a title
    text = re.sub(r"(?m)^ {0,3}#{1,6}\s.*$", ". ", text)  # so does a Markdown heading's line
    text = re.sub(r"\s+", " ", text).strip()
    for match in re.finditer(r"[A-Z][^.!?]{30,300}[a-z0-9)\"'][.!?]", text):
        if _is_prose(match.group(0)):
            return match.group(0)
    return ""


def _is_prose(sentence: str) -> bool:
    letters = [c for c in sentence if c.isalpha()]
    upper = sum(c.isupper() for c in letters)
    symbols = sum(c in "=*()[]{}:|_" for c in sentence)
    return upper <= len(letters) * 0.15 and symbols <= 3


def _urls(results: list[str]) -> list[str]:
    seen = []
    for url in URL.findall("\n".join(results)):
        url = url.rstrip(".,;:")
        if url not in seen:
            seen.append(url)
    return seen


def report_title(task: str, limit: int = 200) -> str:
    """The task as the report's heading, cut between words: an address it holds is never cut
    (a cut copy read as a second source, flagged), and one word longer than `limit` stays."""
    kept: list[str] = []
    length = -1
    for word in task.split():
        length += 1 + len(word)
        if kept and length > limit:
            return literal(" ".join(kept)) + " …"
        kept.append(word)
    return literal(" ".join(kept))


def extractive_report(c: Conversation) -> str:
    """Quote what the tools returned, cite where it came from, say what is missing."""
    lines = [f"# {report_title(c.task)}", ""]
    lines.append(
        "*Written by the offline demo model: an extractive summary that quotes the documents "
        "the agents found. It does not reason like a language model.*"
    )
    own = c.results.get("query", []) + c.results.get("web_search", [])
    quotes = [q for q in (_quote(text) for text in own) if q]
    lines += ["", "## Findings", ""]
    lines += quotes or ["No document in the knowledge base matched this question."]
    reports = c.results.get("wait_subagents", [])
    # A section only for sub-agents that reported (a wait that found none drew an empty one).
    if blocks := SUBAGENT_BLOCK.findall(reports[-1]) if reports else []:
        lines += ["", "## From the sub-agents", ""]
        for name, status, report in blocks:
            found = FINDINGS.search(report)
            body = found.group(1).strip() if found else "(nothing found)"
            lines += [f"### {name} ({status})", "", body, ""]
    if c.earlier:
        quoted = {url for _, url in CITED.findall("\n".join(lines))}
        lines += earlier_section(c.earlier, c.task, quoted=quoted)
    messages = [m for m in c.results.get("read_messages", []) if m != "No new messages."]
    if messages:
        lines += ["", "## Messages from siblings", ""] + [f"> {m}" for m in messages]
    # The sources are exactly the passages quoted above.
    cited = list(dict.fromkeys((url, title) for title, url in CITED.findall("\n".join(lines))))
    lines += ["", "## Sources", ""]
    names = source_names(cited)  # two passages of one document: each named by its passage
    lines += [f"- [{name}]({url})" for (url, _), name in zip(cited, names, strict=True)]
    lines += [] if cited else ["- (none found)"]
    return "\n".join(lines)


SUBAGENT_BLOCK = re.compile(
    r"^## ([\w-]+) \(run \d+\): (\w+)\n\n(.*?)(?=^## [\w-]+ \(run |\Z)", re.S | re.M
)
FINDINGS = re.compile(r"^## Findings\n(.*?)(?=^## |\Z)", re.S | re.M)


HIT = re.compile(
    r"^\[\d+\] (?P<title>.+?) \((?P<url>(?:kb|https?)://[^)\s]+)\)\n"
    r"(?P<text>.*?)(?=\n\n\[\d+\] |\Z)",
    re.S | re.M,
)


def _quote(result: str) -> str:
    """Quote the best passages of a query (or search) result, each with its source."""
    if result.startswith("error:"):
        return f"- The tool failed: {result[6:].strip()}"
    quotes = []
    for hit in HIT.finditer(result):  # the first three that say something in prose
        sentence = first_sentence(hit.group("text"))
        if sentence:
            quote, title = literal(sentence), literal(hit.group("title"))
            quotes.append(f"> {quote}\n>\n> — [{title}]({hit.group('url')})")
        if len(quotes) == 3:
            break
    if quotes:
        return "\n\n".join(quotes)
    sentence = first_sentence(result)
    urls = _urls([result])
    if not sentence:
        return ""
    return f"> {literal(sentence)}" + (f" ([source]({urls[0]}))" if urls else "")
