"""Whose Python holds the GIL: a py-spy sample of the web process split by the code running.

    .venv/bin/python bench/gil.py --agents 120 120 120 --py-spy /tmp/gil.txt
    .venv/bin/python bench/owners.py /tmp/gil.txt
    .venv/bin/python bench/owners.py /tmp/research.txt    # from research_cpu.py --py-spy

Reads a raw py-spy record (`--format raw --gil`: one line a stack, its frames from the
thread's start to the running function, then the count) and prints the samples split two
ways:

- by the code of the running function itself (its "self" time): Canopy's own modules
  (agents/, research/, frontend/) in one row, each library and standard module by its
  top-level package in the others, then Canopy's share by module. Canopy's share is what a
  compiled hot path of its own (mypyc, an extension) could make faster; the rest runs in
  code it calls (round forty);
- by thread role: the first Canopy function on the stack names it (the writer, an agent,
  a request's view), and a stack with none is the server's loop (daphne, Twisted, asyncio,
  the websockets' framing), with the Canopy share of each.

Stacks of the server's start and stop (the pool's resume and shutdown) are left out.
"""

import argparse
import re
from collections import Counter

OWN = ("agents/", "research/", "frontend/", "canopy/")
FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*):\d+\)$")
CANOPY = "Canopy's own modules"
# The server's start and stop: the pool resuming or ending the runs it finds.
OUTSIDE_THE_LOAD = ("_resume_interrupted", "worker_stop", "_end_runs_of", "runs_fail")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("record", help="a py-spy record, raw format")
    parser.add_argument("--top", type=int, default=12, help="rows of each split (12)")
    options = parser.parse_args()
    split = read(options.record)
    total = sum(split["code"].values())
    if not total:
        raise SystemExit(f"{options.record}: no samples of the load")
    own = split["code"][CANOPY]
    print(f"{total} samples of the GIL held; Canopy's own code {own / total:.0%} of them")
    print("\n| running code | samples | share |\n| --- | --- | --- |")
    for code, count in top(split["code"], options.top):
        print(f"| {code} | {count} | {count / total:.1%} |")
    print("\n| Canopy's module | samples | share |\n| --- | --- | --- |")
    for module, count in top(split["module"], options.top):
        print(f"| {module} | {count} | {count / total:.1%} |")
    print("\n| thread role (first Canopy function) | samples | share | of it Canopy's own |")
    print("| --- | --- | --- | --- |")
    for role, count in top(split["role"], options.top):
        mine = split["role_own"][role]
        print(f"| {role} | {count} | {count / total:.1%} | {mine / count:.0%} |")


def read(path: str) -> dict[str, Counter]:
    code, module, role, role_own = Counter(), Counter(), Counter(), Counter()
    with open(path) as lines:
        for line in lines:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or any(name in stack for name in OUTSIDE_THE_LOAD):
                continue
            frames = [FRAME.match(frame) for frame in stack.split(";")]
            files = [frame["file"] if frame else "" for frame in frames]
            running = owner(files[-1])
            first_own = next(
                (frame["function"] for frame in frames if frame and frame["file"].startswith(OWN)),
                "the server's loop (no Canopy function)",
            )
            code[running] += int(count)
            role[first_own] += int(count)
            if running == CANOPY:
                module[files[-1]] += int(count)
                role_own[first_own] += int(count)
    return {"code": code, "module": module, "role": role, "role_own": role_own}


def owner(file: str) -> str:
    """Canopy's own code, or the library or standard module a file belongs to."""
    if file.startswith(OWN):
        return CANOPY
    top_level = file.split("/")[0]
    return top_level.removesuffix(".py") or "(no file)"


def top(counts: Counter, rows: int) -> list[tuple[str, int]]:
    """The `rows` largest, then the rest in one row."""
    ordered = counts.most_common()
    shown = ordered[:rows]
    rest = sum(count for _, count in ordered[rows:])
    return shown + ([("(the rest)", rest)] if rest else [])


if __name__ == "__main__":
    main()
