"""Kinds of sub-agent, defined in files (seed 001's definitions, seed 002's SUBAGENT.md).

A kind is a Markdown file: YAML front matter, then the kind's instructions and report format,
which join the prompt of every sub-agent of that kind.

    ---
    name: verifier
    description: Reads a draft and the sources it cites; returns unsupported claims and gaps.
    tools: [read_page, query]
    steps: {min: 2, max: 15, default: 8}
    default_tier: ""
    ---
    You are a verifier. ...

The built-in kinds are in prompts/agents/; an admin adds kinds (or replaces a built-in one of
the same name) in the folder RESEARCH_AGENT_KINDS_DIR names. Model tiers come from the setting
RESEARCH_MODEL_TIERS. Both are read and checked once, at startup (AgentsConfig.ready): a
malformed file, an unknown tool or tier, a tier whose model has no price stop the server with
an error that names the file and the field.

What the parent decides is only which kind, which tier and how many steps (clipped to the
kind's range): a child's tools are its kind's that its parent also has, never more.
"""

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from research import pricing

BUILT_IN_DIR = Path(settings.BASE_DIR) / "prompts" / "agents"
DEFAULT_KIND = "researcher"
# The research tools a kind may list; the team tools follow seed 000's rules, not the kind.
RESEARCH_TOOLS = ("web_search", "read_page", "query", "remember")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n---[ \t]*(?:\n|\Z)(.*)\Z", re.DOTALL)


class KindError(ImproperlyConfigured):
    """A kind file or the tier setting is malformed: the message names the file and field."""


@dataclass(frozen=True)
class Kind:
    name: str
    description: str
    tools: tuple[str, ...]
    min_steps: int
    max_steps: int
    default_steps: int
    default_tier: str
    instructions: str
    path: Path

    def tools_for(self, parent_tools: frozenset[str]) -> list[str]:
        """A child's research tools: its kind's that its parent has, never more (seed 001)."""
        return [tool for tool in self.tools if tool in parent_tools]

    def clip_steps(self, requested: int | None) -> int:
        """The step budget a child of this kind gets: the request clipped to the kind's range
        (and the server's limit), or the kind's default when there is none (seed 001)."""
        limit = settings.RESEARCH_MAX_STEPS_LIMIT
        if requested is None:
            return min(self.default_steps, limit)
        return max(min(self.min_steps, limit), min(self.max_steps, limit, requested))


@dataclass(frozen=True)
class Catalog:
    kinds: dict[str, Kind]
    tiers: dict[str, str]

    def kind(self, name: str) -> Kind:
        return self.kinds[name]

    def model_for(self, *, kind: Kind, tier: str | None, parent_model: str) -> tuple[str, str]:
        """(tier, model) of a child: the tier asked for, else the kind's default tier, else
        none and the parent's model."""
        tier = tier or (kind.default_tier if kind.default_tier in self.tiers else "")
        return (tier, self.tiers[tier]) if tier else ("", parent_model)


def parse(path: Path) -> Kind:
    """One kind file, checked field by field."""
    # utf-8-sig: an editor's byte-order mark is not text; Windows line ends read as Unix ones.
    text = path.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
    match = FRONT_MATTER.match(text)
    if match is None:
        raise KindError(f"{path}: a kind file starts with YAML front matter between '---' lines")
    try:
        meta = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as error:
        raise KindError(f"{path}: the front matter is not valid YAML: {error}") from None
    if not isinstance(meta, dict):
        raise KindError(f"{path}: the front matter must be a mapping of fields")

    def fail(field: str, problem: str) -> KindError:
        return KindError(f"{path}: field '{field}' {problem}")

    known = {"name", "description", "tools", "steps", "default_tier"}
    unknown = sorted(set(meta) - known)
    if unknown:
        raise fail(unknown[0], f"is not a kind field (the fields are: {', '.join(sorted(known))})")
    name = meta.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise fail("name", "must be 1 to 40 lowercase letters, digits, - or _")
    if name != path.stem:
        raise fail("name", f"is {name!r} but the file is {path.name}: they must match")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise fail("description", "is required: one line the parent reads to choose a kind")
    tools = meta.get("tools")
    if not isinstance(tools, list) or not all(isinstance(tool, str) for tool in tools):
        raise fail("tools", f"must be a list of tool names from: {', '.join(RESEARCH_TOOLS)}")
    for tool in tools:
        if tool not in RESEARCH_TOOLS:
            raise fail("tools", f"names {tool!r}, which is not one of: {', '.join(RESEARCH_TOOLS)}")
    steps = meta.get("steps")
    if not isinstance(steps, dict) or set(steps) != {"min", "max", "default"}:
        raise fail("steps", "must be a mapping {min: N, max: N, default: N}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in steps.values()):
        raise fail("steps", "must hold whole numbers")
    if not 1 <= steps["min"] <= steps["default"] <= steps["max"]:
        raise fail("steps", "must satisfy 1 <= min <= default <= max")
    default_tier = meta.get("default_tier") or ""
    if not isinstance(default_tier, str):
        raise fail("default_tier", "must be a tier name or empty")
    instructions = match.group(2).strip()
    if not instructions:
        raise KindError(f"{path}: the body (the kind's instructions and report format) is empty")
    return Kind(
        name=name,
        description=" ".join(description.split()),
        tools=tuple(tools),
        min_steps=steps["min"],
        max_steps=steps["max"],
        default_steps=steps["default"],
        default_tier=default_tier,
        instructions=instructions,
        path=path,
    )


def load(folders: list[Path], tiers: dict[str, str]) -> Catalog:
    """The kinds of `folders` (a later folder's kind replaces an earlier one of its name) and
    the tiers, checked against each other and the price table."""
    for tier, model in tiers.items():
        if not NAME_PATTERN.fullmatch(tier):
            raise KindError(
                f"RESEARCH_MODEL_TIERS: tier {tier!r} must be lowercase letters, digits, - or _"
            )
        if not pricing.is_known(model):
            raise KindError(
                f"RESEARCH_MODEL_TIERS: tier {tier!r} names model {model!r}, which has no "
                "price: add it to RESEARCH_MODEL_PRICES"
            )
    kinds: dict[str, Kind] = {}
    for folder in folders:
        if not folder.is_dir():
            raise KindError(f"RESEARCH_AGENT_KINDS_DIR: {folder} is not a folder")
        for path in sorted(folder.glob("*.md")):
            kind = parse(path)
            if tiers and kind.default_tier and kind.default_tier not in tiers:
                raise KindError(
                    f"{path}: field 'default_tier' is {kind.default_tier!r}, which is not a "
                    f"configured tier ({', '.join(tiers)})"
                )
            kinds[kind.name] = kind
    if DEFAULT_KIND not in kinds:
        raise KindError(f"no '{DEFAULT_KIND}' kind: {BUILT_IN_DIR} must hold {DEFAULT_KIND}.md")
    return Catalog(kinds=kinds, tiers=dict(tiers))


@cache
def catalog() -> Catalog:
    """The kinds and tiers of the settings, read once (tests clear it with `reload`)."""
    folders = [BUILT_IN_DIR]
    if settings.RESEARCH_AGENT_KINDS_DIR:
        folders.append(Path(settings.RESEARCH_AGENT_KINDS_DIR))
    return load(folders, settings.RESEARCH_MODEL_TIERS)


def reload() -> Catalog:
    catalog.cache_clear()
    return catalog()


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs) -> None:
    if setting in {"RESEARCH_AGENT_KINDS_DIR", "RESEARCH_MODEL_TIERS", "RESEARCH_MODEL_PRICES"}:
        catalog.cache_clear()
