"""The model client's own CPU per call: OpenAIChat against the scripted endpoint.

    .venv/bin/python bench/model_call.py                  # 300 calls, 40 messages, 12 tools
    .venv/bin/python bench/model_call.py --calls 1000 --profile /tmp/model_call.prof

One thread calls `OpenAIChat.chat()` with a conversation of `--messages` messages (a system
prompt, the task, then assistant tool calls and tool results of about 1.5 KB each) and 12
tool schemas; the scripted server answers each call at once with a tool call. The figure is
the calling thread's CPU time per call (`time.thread_time`): the request built and sent, the
answer received and parsed, the client's retry and error machinery around it. The server
runs in other threads, so its work is not counted; the median of `--rounds` rounds is shown.
"""

import argparse
import cProfile
import json
import os
import statistics
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))


def main() -> None:
    options = parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "research.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-anything-else-0123456789")
    import django

    django.setup()
    from agents.llm.openai_client import OpenAIChat
    from agents.llm.scripted import ScriptedLLM, call

    messages = conversation(options.messages)
    tools = tool_schemas(12)
    with ScriptedLLM(keep_alive=True) as llm:
        llm.default(call("web_search", query="otters and their rivers"))
        client = OpenAIChat(base_url=llm.base_url, api_key="bench", timeout=30, max_retries=2)
        for _ in range(20):  # warm: imports, the connection pool, the first request's setup
            client.chat(model="scripted", messages=messages, tools=tools)
        profile = cProfile.Profile() if options.profile else None
        rounds = []
        for _ in range(options.rounds):
            if profile:
                profile.enable()
            started = time.thread_time()
            for _ in range(options.calls):
                client.chat(model="scripted", messages=messages, tools=tools)
            rounds.append((time.thread_time() - started) * 1000 / options.calls)
            if profile:
                profile.disable()
    if profile:
        profile.dump_stats(options.profile)
    body = len(json.dumps({"messages": messages, "tools": tools}))
    print(
        f"model client CPU per call ({options.messages} messages, 12 tools, body {body // 1024}"
        f" KB), {options.rounds} rounds of {options.calls}: median {statistics.median(rounds):.3f}"
        f" ms, best {min(rounds):.3f} ms  (rounds: {', '.join(f'{r:.3f}' for r in rounds)})"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per round (300)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (5)")
    parser.add_argument("--messages", type=int, default=40, help="conversation length (40)")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the calls into FILE")
    return parser.parse_args()


def conversation(length: int) -> list[dict]:
    messages = [
        {"role": "system", "content": "You research a topic with tools. " * 60},
        {"role": "user", "content": "otters: the history side, with sources"},
    ]
    turn = 0
    while len(messages) < length:
        turn += 1
        call_id = f"call_{turn}"
        arguments = json.dumps({"query": f"otters {turn}"})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "web_search", "arguments": arguments},
                    }
                ],
            }
        )
        result = f"result {turn}: otters build holts along rivers — “sources” café. " * 25
        messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
    return messages[:length]


def tool_schemas(count: int) -> list[dict]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{index}" if index else "web_search",
                "description": "A tool the agent may call, described in a sentence or two.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "what to look for"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 10},
                    },
                    "required": ["query"],
                    "additionalProperties": False,
                },
            },
        }
        for index in range(count)
    ]


if __name__ == "__main__":
    main()
