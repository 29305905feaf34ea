"""Domain errors. The edges translate them: a 400/404/429 for HTTP, a tool result for a model."""


class ResearchError(Exception):
    """A refused operation, with a message meant for the person or model that asked."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidInput(ResearchError):
    """Bad input; `field` names what is wrong."""


class NotFound(ResearchError):
    """No such object for this owner (another user's run is not found, never forbidden)."""


class TooManyRuns(ResearchError):
    """The owner already has the most roots working at once."""


class LimitReached(ResearchError):
    """A sub-agent limit of seed 000 (per agent, per tree, generations)."""


class Conflict(ResearchError):
    """The run is not in a state that allows it (a 409): a cancel of a research that ended,
    a delete of a sub-agent (a research's record is deleted whole)."""


class NotResumable(Conflict):
    """The research ended done, was cancelled by its analyst, or still works (a 409)."""


class Throttled(ResearchError):
    """Too many of one action in the owner's rate (research.ops.throttles): the next is allowed
    in `wait` whole seconds. The message is the REST API's 429 text (DRF's), so an MCP client
    reads what a script reads; the API answers DRF's own Throttled, with Retry-After."""

    def __init__(self, wait: int):
        unit = "second" if wait == 1 else "seconds"
        super().__init__(f"Request was throttled. Expected available in {wait} {unit}.")
        self.wait = wait
