"""OpenAIChat against the scripted endpoint, over real HTTP through the `openai` client."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents.llm import LLMError, chat_model_for
from agents.llm.openai_client import OpenAIChat
from agents.llm.scripted import (
    NO_MORE_TURNS,
    NO_SCRIPT,
    ScriptedLLM,
    call,
    calls,
    fail,
    raw_call,
    reply,
    slow,
)
from tests.conftest import wait_for

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "web_search",
            "description": "Search the web.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


def chat_client(base_url: str, *, max_retries: int = 0, timeout: float = 5.0) -> OpenAIChat:
    return OpenAIChat(
        base_url=base_url, api_key="test-key", timeout=timeout, max_retries=max_retries
    )


def ask(client: OpenAIChat, task: str, *, tools=(), history=()):
    messages = [{"role": "system", "content": "You research."}, {"role": "user", "content": task}]
    return client.chat(model="scripted", messages=[*messages, *history], tools=list(tools))


def host_of(server: ScriptedLLM) -> str:
    return server.base_url.removeprefix("http://").removesuffix("/v1")


def test_text_reply_comes_back_with_its_usage(llm):
    llm.script("context managers", reply("They call __exit__.", usage=(321, 45)))

    response = ask(chat_client(llm.base_url), "Explain context managers")

    assert response.content == "They call __exit__."
    assert response.tool_calls == []
    assert (response.input_tokens, response.output_tokens) == (321, 45)


def test_tools_are_sent_only_when_there_are_some(llm):
    llm.script("task", reply("one"), reply("two"))
    client = chat_client(llm.base_url)

    ask(client, "task", tools=TOOLS)
    ask(client, "task")

    with_tools, without_tools = llm.requests_for("task")
    assert [tool["function"]["name"] for tool in with_tools["tools"]] == ["web_search"]
    assert "tools" not in without_tools


def test_several_tool_calls_in_one_turn_keep_their_raw_arguments(llm):
    llm.script(
        "pythons",
        calls(
            call("web_search", query="python exceptions"),
            call("spawn_subagent", name="scout", task="find PEP 343"),
            raw_call("read_page", '{"url": "http://a'),
        ),
    )

    response = ask(chat_client(llm.base_url), "Research pythons", tools=TOOLS)

    assert [c.name for c in response.tool_calls] == ["web_search", "spawn_subagent", "read_page"]
    assert json.loads(response.tool_calls[0].arguments) == {"query": "python exceptions"}
    assert json.loads(response.tool_calls[1].arguments) == {"name": "scout", "task": "find PEP 343"}
    assert response.tool_calls[2].arguments == '{"url": "http://a'
    assert len({c.id for c in response.tool_calls}) == 3
    assert response.content == ""


def test_longest_match_wins_and_each_script_runs_in_order(llm):
    llm.script("research", reply("root 1"), reply("root 2"))
    llm.script("research the history", reply("child"))
    client = chat_client(llm.base_url)

    answers = [
        ask(client, "research Python").content,
        ask(client, "research the history of Python").content,
        ask(client, "research Python").content,
    ]

    assert answers == ["root 1", "child", "root 2"]


def test_exhausted_or_missing_script_ends_with_a_note_and_is_recorded(llm):
    llm.script("known task", reply("done"))
    client = chat_client(llm.base_url)

    ask(client, "known task")
    exhausted = ask(client, "known task")
    unknown = ask(client, "something else")

    assert (exhausted.content, exhausted.tool_calls) == (NO_MORE_TURNS, [])
    assert unknown.content == NO_SCRIPT
    assert llm.unscripted == ["known task", "something else"]


def test_default_script_answers_what_nothing_else_matches(llm):
    llm.script("special", reply("special answer")).default(reply("default answer"))
    client = chat_client(llm.base_url)

    assert ask(client, "anything").content == "default answer"
    assert ask(client, "special task").content == "special answer"


def test_callable_turn_builds_its_answer_from_what_the_agent_was_told(llm):
    def report_run_id(messages):
        return reply(f"collected {messages[-1]['content']}")

    llm.script("spawn", call("spawn_subagent", name="a", task="t"), report_run_id)
    client = chat_client(llm.base_url)
    first = ask(client, "spawn a helper")
    history = [first.as_message(), tool_message(first.tool_calls[0].id, "run 42 started")]

    second = ask(client, "spawn a helper", history=history)

    assert second.content == "collected run 42 started"


def test_a_failing_turn_function_ends_the_conversation_and_is_recorded(llm):
    llm.script("task", lambda messages: messages[99])

    response = ask(chat_client(llm.base_url), "task")

    assert "IndexError" in response.content
    assert len(llm.errors) == 1


def test_tool_results_return_what_the_agent_sent_back_once_each(llm):
    llm.script(
        "research",
        calls(call("web_search", query="a"), call("read_page", url="http://x")),
        call("web_search", query="b"),
        reply("report"),
    )
    client = chat_client(llm.base_url)
    history: list[dict] = []
    for results in (["hits for a", "page x"], ["hits for b"]):
        response = ask(client, "research it", tools=TOOLS, history=history)
        history.append(response.as_message())
        history += [
            tool_message(c.id, text) for c, text in zip(response.tool_calls, results, strict=True)
        ]
    ask(client, "research it", tools=TOOLS, history=history)

    everything = llm.tool_results("research")
    searches = llm.tool_results("research", name="web_search")

    assert [(r["name"], r["content"]) for r in everything] == [
        ("web_search", "hits for a"),
        ("read_page", "page x"),
        ("web_search", "hits for b"),
    ]
    assert [r["content"] for r in searches] == ["hits for a", "hits for b"]
    assert llm.tool_results("another task") == []


# The first try goes over one of the process's kept connections, the others through the openai
# client (agents.llm.openai_client): a 429 is retried after the client's wait, as a 5xx is.
@pytest.mark.parametrize("status", [500, 429])
def test_server_error_then_success_is_retried_by_the_client(llm, status):
    llm.script("task", fail(status), reply("after retry"))

    response = ask(chat_client(llm.base_url, max_retries=2, timeout=2), "task")

    assert response.content == "after retry"
    assert len(llm.requests) == 2


@pytest.mark.parametrize("status", [503, 429])
def test_server_error_on_every_try_names_status_host_and_tries(llm, status):
    llm.script("task", fail(status, times=3), reply("never seen"))

    with pytest.raises(LLMError) as error:
        ask(chat_client(llm.base_url, max_retries=2, timeout=2), "task")

    assert str(error.value) == f"llm: {status} from {host_of(llm)} after 3 tries"
    assert len(llm.requests) == 3


def test_unauthorized_is_not_retried_and_quotes_the_server(llm):
    llm.script("task", fail(401, message="Incorrect API key provided"), reply("never seen"))

    with pytest.raises(LLMError) as error:
        ask(chat_client(llm.base_url, max_retries=2), "task")

    assert str(error.value) == f"llm: 401 from {host_of(llm)}: Incorrect API key provided"
    assert len(llm.requests) == 1


def test_down_endpoint_says_it_cannot_connect():
    url = ScriptedLLM.down_url()
    host = url.removeprefix("http://").removesuffix("/v1")

    with pytest.raises(LLMError) as error:
        ask(chat_client(url, max_retries=2, timeout=2), "task")

    assert str(error.value) == f"llm: cannot connect to {host} after 3 tries"


def test_slow_answer_past_the_timeout_says_how_long_it_waited(llm):
    llm.script("task", slow(2, reply("too late")))

    with pytest.raises(LLMError) as error:
        ask(chat_client(llm.base_url, max_retries=0, timeout=0.3), "task")

    assert str(error.value) == f"llm: no answer from {host_of(llm)} within 0.3s after 1 try"


def test_the_server_counts_its_own_time_answering_which_benchmarks_take_out(llm):
    # bench/step_cost.py takes the model's own time out of Canopy's: a slow turn's delay and
    # the server's work on each request, measured by the server, not by the client.
    llm.script("timed", reply("at once"), slow(0.3, reply("later")))
    client = chat_client(llm.base_url)
    assert llm.answering_seconds == 0.0

    # The server counts a request once its answer is out: the client may read it first.
    ask(client, "timed")
    wait_for(lambda: llm.answering_seconds > 0, message="the first answer was not counted")
    at_once = llm.answering_seconds
    ask(client, "timed")
    wait_for(lambda: llm.answering_seconds > at_once, message="the second was not counted")

    assert at_once < 0.25
    assert 0.3 <= llm.answering_seconds - at_once < 2.0


class NoChoicesHandler(BaseHTTPRequestHandler):
    """A broken proxy: a 200 whose completion has no choices."""

    body = b'{"id": "x", "object": "chat.completion", "choices": []}'

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = self.body
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:
        pass


class NotJSONHandler(NoChoicesHandler):
    """A proxy's error page sent with a 200 and a JSON content type."""

    body = b"<html><body>Bad gateway</body></html>"


@pytest.mark.parametrize("handler", [NoChoicesHandler, NotJSONHandler])
def test_answer_without_choices_is_an_llm_error(handler):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(LLMError) as error:
            ask(chat_client(f"http://{host}/v1"), "task")
    finally:
        server.shutdown()
        server.server_close()

    assert str(error.value) == f"llm: answer from {host} has no choices"


def test_real_model_names_share_one_client_on_the_configured_endpoint(scripted_llm):
    scripted_llm.script("task", reply("via settings"))

    model = chat_model_for("scripted")

    assert model is chat_model_for("another-model")
    assert ask(model, "task").content == "via settings"


def tool_message(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}
