"""Remote MCP servers whose tools agents may use: registered by an admin, never by a user.

The headers are secrets (an API key, a bearer token): they leave the database only to go to
the server itself. No page, event, log line or transcript shows them; the admin shows their
names with the values masked.
"""

from django.db import models

# Server names prefix the tool names agents see ("notes__search"): a model's function names
# allow letters, digits, "_" and "-" only, 64 at most.
TOOL_SEPARATOR = "__"


def default_kinds() -> list[str]:
    return ["researcher"]


class RemoteServer(models.Model):
    name = models.SlugField(
        max_length=30,
        unique=True,
        help_text="Short and unique: agents see its tools as NAME__tool (letters, digits, - "
        "and _).",
    )
    url = models.URLField(
        max_length=500, help_text="The MCP endpoint (streamable HTTP), e.g. https://host/mcp."
    )
    headers = models.JSONField(
        default=dict,
        blank=True,
        help_text="Sent with every request (e.g. Authorization). Secret: shown masked.",
    )
    allowed_tools = models.JSONField(
        default=list,
        blank=True,
        help_text='The names of the tools agents may use, as the server names them; ["*"] '
        "for all. Empty: none.",
    )
    allowed_kinds = models.JSONField(
        default=default_kinds,
        blank=True,
        help_text="The agent kinds that may use them (a research's root agent always may).",
    )
    enabled = models.BooleanField(default=True)
    # The server's tool list as last loaded by an agent process: names, descriptions and
    # input schemas. Agents' prompts list names and summaries; a schema is sent to the model
    # only once an agent enables that tool.
    catalog = models.JSONField(default=list, blank=True, editable=False)
    catalog_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    catalog_error = models.TextField(blank=True, default="", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "gb_agent_research_remote_servers"
        verbose_name = "remote MCP server"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<RemoteServer {self.pk} {self.name}>"  # never the headers

    def allows(self, tool_name: str) -> bool:
        return "*" in self.allowed_tools or tool_name in self.allowed_tools

    def admits(self, *, kind: str, is_root: bool) -> bool:
        """Whether an agent of `kind` may use this server's tools (a root always may)."""
        return is_root or (isinstance(self.allowed_kinds, list) and kind in self.allowed_kinds)
