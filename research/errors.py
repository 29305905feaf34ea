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


class NotResumable(ResearchError):
    """The research ended done, was cancelled by its analyst, or still works (a 409)."""
