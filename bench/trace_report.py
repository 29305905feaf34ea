"""The agents of the last tree of a trace (bench/trace/sitecustomize.py), call by call.

    .venv/bin/python bench/trace_report.py /tmp/trace.json            # the last tree's agents
    .venv/bin/python bench/trace_report.py /tmp/trace.json --agents 7 # how many agents it had

Each agent's thread from its run_agent, in the order the agents ended: every traced call
inside it, its start in milliseconds from the tree's first agent, its wall time and its
thread's CPU. The model calls after an agent's fourth are left out (their steps are alike).
"""

import argparse
import json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--agents", type=int, default=7, help="agents of the last tree (7)")
    options = parser.parse_args()
    with open(options.trace) as file:
        calls = sorted((tuple(call) for call in json.load(file)), key=lambda call: call[2])
    lives = [call for call in calls if call[1] == "run_agent"][-options.agents :]
    if not lives:
        raise SystemExit("no run_agent in the trace: did daphne start with TRACE_OUT set?")
    base = min(life[2] for life in lives)
    for life in sorted(lives, key=lambda life: life[3]):
        thread, _, began, ended, cpu = life
        print(f"--- {thread}: {ms(began - base)} to {ms(ended - base)} ms, CPU {ms(cpu)} ms")
        model_calls = 0
        for call in calls:
            if call is life or call[0] != thread or not began <= call[2] <= call[3] <= ended:
                continue
            if call[1].endswith("_call_model"):
                model_calls += 1
            if model_calls > 4 and call[1].endswith(("_call_model", ".chat")):
                continue
            at, took, cpu = ms(call[2] - base), ms(call[3] - call[2]), ms(call[4])
            print(f"  {at:>8} +{took:>7} CPU {cpu:>6}  {call[1]}")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


if __name__ == "__main__":
    main()
