"""Agents as tasks on one loop, measured before it is built: a prototype, not wired into the
product, of the design change every round of issue 25 since the sixth has named.

    .venv/bin/python bench/loop_agents.py                          # both modes, 120 agents
    .venv/bin/python bench/loop_agents.py --agents 6 --delay 0     # CPU per call at 0 ms
    .venv/bin/python bench/loop_agents.py --agents 198 --mode loop

Each agent makes `--calls` model calls that each ask for one tool, then a last one that
answers; the scripted model (agents/llm/scripted.py) runs in a process of its own, answers
each call after `--delay` seconds over real HTTP, and keeps its connections open. The agents
come in trees of a root and 5 children, as in bench/served.py. After each call an agent runs
a trivial tool and hands its step's records to one writer thread, which writes them in
batches with bench/group_commit.py's batch (one UPDATE ... FROM (VALUES ...) for the
counters, roll-ups and event numbers, one INSERT per table for the ledger, steps, states and
events, the INSERTs and the COMMIT in one round trip), on PostgreSQL, in the product's
tables. Agents never wait for their records.

The two modes differ only in what an agent is:
- `threads`: a thread per agent, the model called on a kept connection per thread
  (research.outbound.kept, the product's own: agents.runtime.pool, agents.llm);
- `loop`: a task per agent on one asyncio loop in one thread, the model called on a kept
  connection per task (asyncio streams, the same HTTP/1.1 exchange); the writer is still a
  thread.

(A first version called the model with a shared `httpx.Client` and `httpx.AsyncClient`: at
120 agents their connection pools cost this process 6.7 and 16 ms of CPU a call, most of it
the pools' own bookkeeping, which says nothing about threads against a loop.)

What neither mode has: Django (the records are the raw statements of the batch), the `openai`
client (requests are built with json.dumps and answers parsed with json.loads), the pushes of
events to browsers, the agents' starts and ends, real tools. So the figures bound what
the product could reach with each design; they are not the product's.

It prints, per mode: the wall time against the ideal (each agent's calls one after the other,
each as long as the scripted server took to answer it: the delay and its own Python), this
process's CPU per model call
(the writer's included; the model's process is not counted), and its context switches per
model call. The rows written are counted afterwards, so a mode that lost records fails.
"""

import argparse
import asyncio
import json
import os
import queue
import resource
import statistics
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

import group_commit  # noqa: E402
from step_cost import ModelProcess  # noqa: E402

from agents.llm.scripted import call, reply, slow  # noqa: E402  (no Django)

CHILDREN = group_commit.CHILDREN
BATCH_MAX = 64
LINGER_SECONDS = 0.002  # the writer lets a batch fill this long from its first record
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "web_search",
            "description": "Search the web.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    }
]


def main() -> None:
    options = parse_args()
    if options.agents % (CHILDREN + 1):
        raise SystemExit(f"--agents must be a multiple of {CHILDREN + 1} (trees of a root and 5)")
    scripts = {
        task(index): [
            slow(options.delay, call("web_search", query=f"query {turn}"))
            for turn in range(options.calls)
        ]
        + [slow(options.delay, reply("done"))]
        for index in range(options.agents * len(options.mode))
    }
    # The model's process forks before Django is set up (step_cost.ModelProcess).
    with ModelProcess(scripts) as model:
        os.environ["PROTOTYPE_MODEL_URL"] = model.base_url
        group_commit.prepare(argparse.Namespace(database="postgres"), "")
        trees = options.agents // (CHILDREN + 1)
        print(
            f"{options.agents} agents ({trees} trees), {options.calls + 1} model "
            f"calls each at {options.delay * 1000:g} ms, PostgreSQL"
        )
        print("| mode | wall s | ideal s | of the ideal | CPU ms per call | switches per call |")
        print("| --- | --- | --- | --- | --- | --- |")
        offset = 0
        for mode in options.mode:
            agents = group_commit.make_tree_runs(trees, owner=f"prototype {mode} {offset}")
            figures = measure(mode, agents, model, options, offset)
            offset += options.agents
            print(
                f"| {mode} | {figures['wall']:.2f} | {figures['ideal']:.2f} | "
                f"{figures['ideal'] / figures['wall']:.0%} | {figures['cpu_ms']:.2f} | "
                f"{figures['switches']:.1f} |"
            )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=120, help="agents, in trees of 6 (120)")
    parser.add_argument("--calls", type=int, default=9, help="tool-calling turns each (9)")
    parser.add_argument("--delay", type=float, default=0.2, help="seconds a model call (0.2)")
    parser.add_argument(
        "--mode", nargs="+", choices=["threads", "loop"], default=["threads", "loop", "threads"]
    )
    return parser.parse_args()


def task(index: int) -> str:
    return f"prototype agent {index}: research something"


def measure(mode, agents, model, options, offset) -> dict[str, float]:
    writer = Writer()
    answering_before = model.answering_seconds()
    switches_before, cpu_before = switches(), cpu()
    started = time.perf_counter()
    if mode == "threads":
        threads_mode(agents, writer, offset)
    else:
        asyncio.run(loop_mode(agents, writer, offset))
    writer.stop()
    wall = time.perf_counter() - started
    calls = len(agents) * (options.calls + 1)
    steps = writer.check(agents, options.calls)
    # The server's time a call, from its request's arrival to its answer's last byte: the
    # delay and its own Python.
    model_each = (model.answering_seconds() - answering_before) / calls
    return {
        "wall": wall,
        # One agent's calls one after the other, each taking the model's time and no more.
        "ideal": (options.calls + 1) * model_each,
        "cpu_ms": (cpu() - cpu_before) * 1000 / calls,
        "switches": (switches() - switches_before) / calls,
        "steps": steps,
    }


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def switches() -> int:
    """Context switches of every thread of this process so far, ended ones included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


# --- the agent's turn, the same in both modes ----------------------------------------------


def request_body(messages: list[dict]) -> bytes:
    return json.dumps({"model": "scripted", "messages": messages, "tools": TOOLS}).encode()


def take_answer(messages: list[dict], body: bytes) -> bool:
    """Append the model's turn and the tool's result to `messages`; False when it answered."""
    message = json.loads(body)["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": calls})
    for tool_call in calls:
        arguments = json.loads(tool_call["function"]["arguments"])
        result = f"results for {arguments.get('query', '')}: " + "a result. " * 40
        messages.append({"role": "tool", "tool_call_id": tool_call["id"], "content": result})
    return bool(calls)


def first_messages(index: int) -> list[dict]:
    return [
        {"role": "system", "content": "You are a research agent. " * 40},
        {"role": "user", "content": task(index)},
    ]


def threads_mode(agents, writer: "Writer", offset: int) -> None:
    from research.outbound.kept import KeptEndpoint

    endpoint = KeptEndpoint(os.environ["PROTOTYPE_MODEL_URL"], timeout=60, headers={})

    def agent(index: int, run: tuple) -> None:
        messages = first_messages(offset + index)
        while True:
            answer = endpoint.post("/chat/completions", request_body(messages))
            if answer.status != 200:
                raise RuntimeError(f"the model answered {answer.status}")
            if not take_answer(messages, answer.body):
                return
            writer.put(run)

    threads = [
        threading.Thread(target=agent, args=(index, run)) for index, run in enumerate(agents)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


async def loop_mode(agents, writer: "Writer", offset: int) -> None:
    parts = urlsplit(os.environ["PROTOTYPE_MODEL_URL"])
    path = f"{parts.path.rstrip('/')}/chat/completions"

    async def agent(index: int, run: tuple) -> None:
        reader, stream = await asyncio.open_connection(parts.hostname, parts.port)
        messages = first_messages(offset + index)
        try:
            while True:
                body = request_body(messages)
                head = (
                    f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                )
                stream.write(head.encode() + body)
                status, answer = await read_answer(reader)
                if status != 200:
                    raise RuntimeError(f"the model answered {status}")
                if not take_answer(messages, answer):
                    return
                writer.put(run)
        finally:
            stream.close()

    await asyncio.gather(*(agent(index, run) for index, run in enumerate(agents)))


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """An HTTP/1.1 answer with a Content-Length (the scripted server's): status and body."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = next(
        int(line.split(":", 1)[1])
        for line in lines[1:]
        if line.lower().startswith("content-length")
    )
    return status, await reader.readexactly(length)


class Writer:
    """One thread writing the records handed over, in batches (group_commit.steps_batched)."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.batches: list[int] = []
        self.thread = threading.Thread(target=self._run, name="writer")
        self.thread.start()

    def put(self, run: tuple) -> None:
        self.queue.put(run)

    def stop(self) -> None:
        self.queue.put(None)
        self.thread.join()

    def _run(self) -> None:
        db = group_commit.Database("postgres", "")
        try:
            while True:
                first = self.queue.get()
                if first is None:
                    return
                batch, deadline = [first], time.monotonic() + LINGER_SECONDS
                stopping = False
                while len(batch) < BATCH_MAX:
                    try:
                        record = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
                    except queue.Empty:
                        break
                    if record is None:
                        stopping = True
                        break
                    batch.append(record)
                group_commit.steps_batched(db, batch)
                self.batches.append(len(batch))
                if stopping:
                    return
        finally:
            db.close()

    def check(self, agents, calls: int) -> int:
        """The model calls recorded for these agents; every one, or this fails."""
        import psycopg

        ids = [run[0] for run in agents]
        with psycopg.connect(group_commit.POSTGRES_URL) as db:
            (count,) = db.execute(
                f"SELECT count(*) FROM {group_commit.CALLS} WHERE run_id = ANY(%s)", [ids]
            ).fetchone()
        if count != len(agents) * calls:
            raise SystemExit(f"{count} model calls recorded, not {len(agents) * calls}")
        if self.batches:
            print(
                f"  (writer: {len(self.batches)} batches, median "
                f"{statistics.median(self.batches):g} records)",
                file=sys.stderr,
            )
        return count


if __name__ == "__main__":
    main()
