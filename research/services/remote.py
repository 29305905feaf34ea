"""Remote MCP servers: what the agent runtime learns of them (their tool lists), and the
check of who an admin lets use them."""

from pathlib import Path

from django.conf import settings
from django.utils import timezone

from research.errors import InvalidInput
from research.models import RemoteServer

BUILT_IN_KINDS_DIR = Path(settings.BASE_DIR) / "prompts" / "agents"


def remote_catalog_store(*, server_id: int, tools: list[dict] | None, error: str = "") -> None:
    """Record a server's tool list as just loaded, or (`tools` None) why loading it failed;
    the list loaded before a failure stays, for the names and summaries agents see."""
    fields = {"catalog_checked_at": timezone.now(), "catalog_error": error[:2000]}
    if tools is not None:
        fields["catalog"] = tools
    RemoteServer.objects.filter(pk=server_id).update(**fields)


def agent_kind_names() -> list[str]:
    """The kinds an agent can have: one file `<kind>.md` each, built in or in the folder
    RESEARCH_AGENT_KINDS_DIR names. agents.kinds reads and checks those files (a file whose
    name is not its kind's stops every process at startup); the domain, below the runtime,
    needs only their names."""
    folders = [BUILT_IN_KINDS_DIR]
    if settings.RESEARCH_AGENT_KINDS_DIR:
        folders.append(Path(settings.RESEARCH_AGENT_KINDS_DIR))
    return sorted({path.stem for folder in folders for path in folder.glob("*.md")})


def remote_kinds_check(*, kinds: list[str]) -> list[str]:
    """A server's allowed kinds, each the name of a kind (a name that is none would let no
    agent in, silently); InvalidInput names the first unknown one."""
    known = agent_kind_names()
    for kind in kinds:
        if kind not in known:
            raise InvalidInput(
                f"{kind!r} is not an agent kind; the kinds are: {', '.join(known)}.",
                field="allowed_kinds",
            )
    return kinds
