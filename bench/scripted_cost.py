"""What the scripted model costs the machine a call: the benchmarks' fake model runs on the
same two cores as Canopy, so its CPU is taken from the load they measure.

    .venv/bin/python bench/scripted_cost.py                       # 120 connections, 200 ms
    .venv/bin/python bench/scripted_cost.py --connections 6 --delay 0

The kept-alive server (agents.llm.scripted_loop, what every benchmark uses) runs in this
process; the clients in another, each on a kept connection, sending a child's conversation
as it grows (a system prompt, eight tools' schemas, up to six tool rounds). It prints this
process's CPU per call (user and system) and its context switches per call, and how long the
clients waited beyond the delay (the model answering late, and the exchange itself).
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from agents.llm.scripted import ScriptedLLM, call, slow  # noqa: E402

CLIENT = r"""
import http.client, json, sys, threading, time
port, connections, calls = (int(value) for value in sys.argv[1:4])
tools = [
    {"type": "function", "function": {"name": f"tool{n}", "description": "d" * 300,
     "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}
    for n in range(8)
]

def body(task, rounds):
    messages = [{"role": "system", "content": "s" * 3000}, {"role": "user", "content": task}]
    for n in range(rounds):
        called = {"id": f"c{n}", "type": "function",
                  "function": {"name": "cancel_subagent", "arguments": '{"name": "nobody"}'}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [called]})
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": "error: none"})
    return json.dumps({"model": "scripted", "messages": messages, "tools": tools}).encode()

walls = []

def agent(number):
    connection = http.client.HTTPConnection("127.0.0.1", port)
    for n in range(calls):
        sent = body(f"task {number}.", n % 7)
        began = time.perf_counter()
        connection.request("POST", "/v1/chat/completions", sent)
        connection.getresponse().read()
        walls.append(time.perf_counter() - began)

threads = [threading.Thread(target=agent, args=(n,)) for n in range(connections)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(walls))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=120)
    parser.add_argument("--calls", type=int, default=20, help="calls per connection (20)")
    parser.add_argument("--delay", type=float, default=0.2, help="seconds a call (0.2)")
    options = parser.parse_args()
    with ScriptedLLM(keep_alive=True) as llm:
        for number in range(options.connections):
            turns = [slow(options.delay, call("cancel_subagent", name="nobody"))]
            llm.script(f"task {number}.", *turns * options.calls)
        port = llm.base_url.split(":")[2].split("/")[0]
        before = resource.getrusage(resource.RUSAGE_SELF)
        arguments = [port, str(options.connections), str(options.calls)]
        client = subprocess.run(
            [sys.executable, "-c", CLIENT, *arguments], check=True, capture_output=True, text=True
        )
        after = resource.getrusage(resource.RUSAGE_SELF)
        calls = len(llm.requests)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    switches = after.ru_nvcsw + after.ru_nivcsw - before.ru_nvcsw - before.ru_nivcsw
    print(
        f"{options.connections} connections, {calls} calls at {options.delay * 1000:.0f} ms: "
        f"{(user + system) * 1000 / calls:.3f} ms of CPU a call (user {user * 1000 / calls:.3f},"
        f" system {system * 1000 / calls:.3f}), {switches / calls:.1f} context switches a call"
    )
    # What a client waited beyond the delay: the model's lateness and the exchange's own time.
    over = sorted((wall - options.delay) * 1000 for wall in json.loads(client.stdout))
    print(
        f"a call's wall beyond its {options.delay * 1000:.0f} ms, as the clients saw it: median "
        f"{statistics.median(over):.3f} ms, p90 {over[int(len(over) * 0.9)]:.3f} ms"
    )


if __name__ == "__main__":
    main()
