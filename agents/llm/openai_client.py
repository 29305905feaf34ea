"""ChatModel on the official `openai` client: any OpenAI-compatible endpoint.

Retries and timeouts are the client's own (exponential backoff on connection errors, 408, 409,
429 and 5xx; 4xx such as 401 are not retried). What the client finally raises is turned into an
LLMError whose message an analyst can act on, e.g. "llm: 503 from api.example.com after 3 tries".
"""

import json
from typing import Any

import openai
from django.conf import settings

from agents.llm.base import ChatResponse, LLMError, ToolCall
from research.clean import cut
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

    def chat(
        self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ChatResponse:
        request: dict[str, Any] = {"model": model, "messages": messages}
        if tools:
            request["tools"] = tools
        # The lean call: the client's create() walks the whole conversation to transform it
        # and builds pydantic models of the answer, on every call, and the conversation only
        # grows. The body goes as bytes serialised once, and the answer comes back as the raw
        # response, parsed once; the client still does the retries, timeouts and errors.
        body = json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()
        try:
            response = self._client.post("/chat/completions", content=body, cast_to=RawResponse)
        except openai.APIError as error:
            raise LLMError(self._describe(error)) from error
        return _chat_response(_parsed(response), host=_host(self._client.base_url))

    def _describe(self, error: openai.APIError) -> str:
        host = _host(error.request.url)
        tries = _tries(error.request, default=self.max_retries + 1)
        if isinstance(error, openai.APIStatusError):
            return _describe_status(error, host=host, tries=tries)
        if isinstance(error, openai.APITimeoutError):
            return f"llm: no answer from {host} within {self.timeout:g}s after {_plural(tries)}"
        if isinstance(error, openai.APIConnectionError):
            return f"llm: cannot connect to {host} after {_plural(tries)}"
        return f"llm: bad answer from {host}: {_short(error.message)}"


def _describe_status(error: openai.APIStatusError, *, host: str, tries: int) -> str:
    status = error.status_code
    if status in _RETRIED_STATUSES or status >= 500:
        return f"llm: {status} from {host} after {_plural(tries)}"
    message = f"llm: {status} from {host}: {_error_detail(error)}"
    return message if tries == 1 else f"{message} (after {_plural(tries)})"


def _error_detail(error: openai.APIStatusError) -> str:
    """The server's own words: the client keeps the body's "error" object (or its text)."""
    body = error.body
    if isinstance(body, dict) and body.get("message"):
        return _short(str(body["message"]))
    if isinstance(body, str) and body.strip():
        return _short(body)
    return error.response.reason_phrase or "no detail"


def _parsed(response: RawResponse) -> Any:
    """The answer's JSON, or None when it is not JSON (a proxy's HTML page)."""
    try:
        return json.loads(response.content)
    except ValueError:
        return None


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
