"""The team tools of seed 000: spawn, wait for and cancel sub-agents (`spawn`, `children`);
list siblings and message them (`messages`). Who may message whom is decided here; the
messenger only carries what it is given. The limits and the record of a spawn are in
research.services.subagent_spawn, the tree's lifecycle (ending sub-agents, refusing an early
answer) in agents.runtime.tree.
"""

from django.conf import settings

from agents.runtime.context import AgentContext
from agents.tools.team.children import cancel_subagent, inspect_subagent, wait_subagents
from agents.tools.team.messages import list_siblings, read_messages, send_message
from agents.tools.team.spawn import spawn_subagent, spawn_subagents
from agents.tools.tool import Tool, offered
from research.selectors import team as team_reads

PARENT_TOOLS = [spawn_subagent, spawn_subagents, wait_subagents, inspect_subagent, cancel_subagent]
SIBLING_TOOLS = [list_siblings, send_message, read_messages]

# --- which tools an agent gets ----------------------------------------------------------------


def tools_for(ctx: AgentContext) -> list[Tool]:
    # Whether an agent is a parent, or one of siblings, is decided once for its group of tools
    # (may_spawn reads the owner's setting); each tool's prepare adapts it to the run.
    tools = []
    if may_spawn(ctx):
        tools += PARENT_TOOLS
    if not ctx.is_root:
        tools += SIBLING_TOOLS
    return offered(ctx, tools)


def may_spawn(ctx: AgentContext) -> bool:
    """Sub-agents are on unless the server or the user turned them off; the last generation
    does not get the tool at all (it never sees it, rather than being refused)."""
    if not settings.RESEARCH_SUBAGENTS_ENABLED:
        return False
    if ctx.depth >= settings.RESEARCH_MAX_SUBAGENT_DEPTH:
        return False
    if ctx.owner_allows_subagents is not None:  # read with its claim
        return ctx.owner_allows_subagents
    return team_reads.subagents_allowed_for(owner_id=ctx.owner_id)
