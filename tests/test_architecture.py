"""The shape of the code (issue 23), checked in `make test` with the rest: no import circle
between Canopy's modules, and no module past the size where one idea has become two."""

from pathlib import Path

import grimp

from tests.conftest import PROJECT

PACKAGES = ("research", "agents", "frontend")
MAX_LINES = 400
# Settings read every variable in one place; migrations are written by Django.
LONGER_ALLOWED = {"research/settings.py"}


def import_circles(graph) -> list[list[str]]:
    """Every group of modules that import each other, directly or through others (Tarjan's
    strongly connected components of the import graph, function-level imports included)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return circles


def test_no_module_imports_itself_back_through_others():
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    assert import_circles(graph) == []


def test_a_circle_is_found_when_there_is_one(tmp_path, monkeypatch):
    """The check itself: two modules that import each other are reported."""
    package = tmp_path / "circled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from circled import b\n")
    (package / "b.py").write_text("def f():\n    from circled import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_circles(grimp.build_graph("circled")) == [["circled.a", "circled.b"]]


def test_no_module_is_longer_than_one_idea():
    too_long = {}
    for package in PACKAGES:
        for path in sorted((PROJECT / package).rglob("*.py")):
            relative = path.relative_to(PROJECT).as_posix()
            if "/migrations/" in relative or relative in LONGER_ALLOWED:
                continue
            lines = len(Path(path).read_text().splitlines())
            if lines > MAX_LINES:
                too_long[relative] = lines
    assert too_long == {}
