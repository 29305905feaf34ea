"""ChatModel on the official `openai` client: any OpenAI-compatible endpoint.

Retries and timeouts are the client's own (exponential backoff on connection errors, 408, 409,
429 and 5xx; 4xx such as 401 are not retried). What the client finally raises is turned into an
LLMError whose message an analyst can act on, e.g. "llm: 503 from api.example.com after 3 tries".

The lean call (issue 25). The first try of every call goes over one of the process's kept
connections (research.outbound.kept): the body as bytes serialised once, the answer parsed once.
A model call is most of an agent's CPU per step, and the client's request building, retry
loop and HTTP stack were most of that. A first try that fails goes on as the client would: a
status it does not retry is described from the answer at once (the same words); one it
retries, a timeout or a lost connection is handed to the client after the client's own first
backoff, with one try fewer left, and the tries counted include the first. Behind a proxy from
the environment every call goes through the client, which honours it.
"""

import json
import time
from types import SimpleNamespace
from typing import Any

import openai
from django.conf import settings

from agents.llm.base import ChatResponse, LLMError, ToolCall
from agents.llm.encoding import EncodedRequests
from research.clean import cut
from research.outbound.errors import TimedOut, TransferFailed
from research.outbound.kept import Answer, KeptEndpoint
from research.outbound.sdk import RawResponse, openai_http_client

# The client sends the number of retries it has taken in this header on every try, so the
# request an error carries tells how many tries were made, including a 401 after a 500.
_RETRY_COUNT_HEADER = "x-stainless-retry-count"
_RETRIED_STATUSES = {408, 409, 429}
_DETAIL_MAX_CHARS = 200


class OpenAIChat:
    """One client per process: the `openai` client is thread-safe and pools its connections."""

    def __init__(
        self, *, base_url: str | None, api_key: str | None, timeout: float, max_retries: int
    ):
        self.timeout = timeout
        self.max_retries = max_retries
        self._client = openai.OpenAI(
            base_url=base_url or None,
            # Local endpoints (vLLM, llama.cpp, Ollama) need no key, but the client refuses
            # to start without one.
            api_key=api_key or "not-needed",
            timeout=timeout,
            max_retries=max_retries,
            http_client=openai_http_client("llm"),
        )
        base = str(self._client.base_url)
        self._host = _host(self._client.base_url)
        self._kept = None
        if KeptEndpoint.usable(base):
            headers = {**self._client.auth_headers, **_strings(self._client.default_headers)}
            try:
                self._kept = KeptEndpoint(base, timeout=timeout, headers=headers)
            except ValueError as problem:  # an API key with a line break, say: no call goes
                raise LLMError(f"llm: cannot call {self._host}: {problem}") from None
        self._encoded = EncodedRequests()
        # After a failed first try: the client, with the tries that are left.
        self._rest = self._client.with_options(max_retries=max(0, max_retries - 1))

    def chat(
        self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ChatResponse:
        # The lean call: the client's create() walks the whole conversation to transform it
        # and builds pydantic models of the answer, on every call, and the conversation only
        # grows. The body goes as bytes, each message serialised once, and the answer comes
        # back raw, parsed once.
        body = self._encoded.body(model, messages, tools)
        if self._kept is None:
            return self._through_client(self._client, body, earlier_tries=0)
        try:
            answer = self._kept.post("/chat/completions", body)
        except TransferFailed as failure:
            if failure.kind.startswith("SSL"):
                # This connection's TLS is not the client's (another CA, a client certificate):
                # the client, which the operator configured, takes every call from now on.
                self._kept = None
                return self._through_client(self._client, body, earlier_tries=0)
            return self._after_first_try(body, self._failure_text(failure), headers=None)
        if 200 <= answer.status < 300:
            return _chat_response(_parsed(answer.body), host=self._host)
        if 300 <= answer.status < 400:  # a redirect: the client follows it, with every try
            return self._through_client(self._client, body, earlier_tries=0)
        text = _status_text(answer.status, _answer_detail(answer), host=self._host, tries=1)
        if not self._client._should_retry(
            SimpleNamespace(status_code=answer.status, headers=answer.headers)
        ):
            raise LLMError(text)
        return self._after_first_try(body, text, headers=answer.headers)

    def _after_first_try(self, body: bytes, text: str, *, headers: Any) -> ChatResponse:
        """The first try failed in a way the client retries: the rest of the tries are the
        client's, after its first backoff; with none left, the first try's failure."""
        if self.max_retries == 0:
            raise LLMError(text)
        options = SimpleNamespace(get_max_retries=lambda default: self.max_retries)
        time.sleep(self._client._calculate_retry_timeout(self.max_retries, options, headers))
        return self._through_client(self._rest, body, earlier_tries=1)

    def _through_client(
        self, client: openai.OpenAI, body: bytes, *, earlier_tries: int
    ) -> ChatResponse:
        try:
            response = client.post("/chat/completions", content=body, cast_to=RawResponse)
        except openai.APIError as error:
            raise LLMError(self._describe(error, client, earlier_tries)) from error
        return _chat_response(_parsed(response.content), host=self._host)

    def _failure_text(self, failure: TransferFailed) -> str:
        """The words the client would use for a first and only try that got no answer."""
        if isinstance(failure, TimedOut):
            return f"llm: no answer from {self._host} within {self.timeout:g}s after 1 try"
        return f"llm: cannot connect to {self._host} after 1 try"

    def _describe(self, error: openai.APIError, client: openai.OpenAI, earlier_tries: int) -> str:
        host = _host(error.request.url)
        tries = earlier_tries + _tries(error.request, default=client.max_retries + 1)
        if isinstance(error, openai.APIStatusError):
            return _status_text(error.status_code, _error_detail(error), host=host, tries=tries)
        if isinstance(error, openai.APITimeoutError):
            return f"llm: no answer from {host} within {self.timeout:g}s after {_plural(tries)}"
        if isinstance(error, openai.APIConnectionError):
            return f"llm: cannot connect to {host} after {_plural(tries)}"
        return f"llm: bad answer from {host}: {_short(error.message)}"


def _status_text(status: int, detail: str, *, host: str, tries: int) -> str:
    if status in _RETRIED_STATUSES or status >= 500:
        return f"llm: {status} from {host} after {_plural(tries)}"
    message = f"llm: {status} from {host}: {detail}"
    return message if tries == 1 else f"{message} (after {_plural(tries)})"


def _error_detail(error: openai.APIStatusError) -> str:
    """The server's own words: the client keeps the body's "error" object (or its text)."""
    return _detail(error.body, error.response.reason_phrase)


def _answer_detail(answer: Answer) -> str:
    """The same words from an answer to the first try, read as the client reads a body."""
    text = answer.body.decode("utf-8", "replace").strip()
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = text
    return _detail(body.get("error", body) if isinstance(body, dict) else body, answer.reason)


def _detail(body: Any, reason: str) -> str:
    if isinstance(body, dict) and body.get("message"):
        return _short(str(body["message"]))
    if isinstance(body, str) and body.strip():
        return _short(body)
    return reason or "no detail"


def _parsed(content: bytes) -> Any:
    """The answer's JSON, or None when it is not JSON (a proxy's HTML page)."""
    try:
        return json.loads(content)
    except ValueError:
        return None


def _strings(headers: Any) -> dict[str, str]:
    """The client's default headers that have a value (it marks the others Omit)."""
    return {name: value for name, value in headers.items() if isinstance(value, str)}


def _chat_response(completion: Any, *, host: str) -> ChatResponse:
    # Nothing validates the body, so a proxy's `{}`, a page that is not JSON or an error
    # without a status arrives here as a completion with no choices.
    choices = completion.get("choices") if isinstance(completion, dict) else None
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise LLMError(f"llm: answer from {host} has no choices")
    message = choices[0].get("message") or {}
    usage = completion.get("usage") or {}
    return ChatResponse(
        content=cut(
            message.get("content") or "",
            settings.RESEARCH_REPORT_MAX_CHARS,
            what="model's answer",
            setting="RESEARCH_REPORT_MAX_CHARS",
        ),
        tool_calls=[_tool_call(call, host=host) for call in message.get("tool_calls") or []],
        input_tokens=usage.get("prompt_tokens") or 0,
        output_tokens=usage.get("completion_tokens") or 0,
    )


def _tool_call(call: dict[str, Any], *, host: str) -> ToolCall:
    function = call.get("function")
    if function is None:
        kind = call.get("type")
        raise LLMError(f"llm: answer from {host} has a {kind!r} tool call, not a function")
    return ToolCall(
        id=call.get("id"), name=function.get("name"), arguments=function.get("arguments") or ""
    )


def _host(url: Any) -> str:  # the client's URL (httpx2.URL)
    return url.netloc.decode("ascii", "replace")


def _tries(request: Any, *, default: int) -> int:
    try:
        return int(request.headers[_RETRY_COUNT_HEADER]) + 1
    except (KeyError, ValueError):
        return default


def _plural(tries: int) -> str:
    return "1 try" if tries == 1 else f"{tries} tries"


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_MAX_CHARS else text[: _DETAIL_MAX_CHARS - 1] + "…"
