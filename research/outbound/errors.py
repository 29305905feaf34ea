"""What can go wrong with an outbound request, in neutral words: each caller frames them for
its audience (the model, the admin, the API), so these carry facts, not sentences."""


class OutboundError(Exception):
    """An outbound request did not get an answer."""


class BadURL(OutboundError):
    """The URL cannot be sent: `problem` is "invalid", "scheme" (not http or https; `scheme`
    says which, "" for none) or "host" (it has none); `detail` is the parser's own words."""

    def __init__(self, problem: str, *, scheme: str = "", detail: str = "") -> None:
        words = {"scheme": f"not an http or https URL ({scheme or 'no scheme'})", "host": "no host"}
        super().__init__(detail or words.get(problem, problem))
        self.problem = problem
        self.scheme = scheme
        self.detail = detail


class Unresolvable(OutboundError):
    """The host did not resolve (`detail`: the resolver's words): DNS may answer next time,
    unlike an address refused."""

    def __init__(self, host: str, detail: str) -> None:
        super().__init__(f"the host {host} does not resolve ({detail})")
        self.host = host
        self.detail = detail


class Refused(OutboundError):
    """An address of the host is not public and the purpose does not allow the host. `where`
    says which ("example.org resolves to 10.0.0.1, a private address")."""

    def __init__(self, host: str, where: str) -> None:
        super().__init__(where)
        self.host = host
        self.where = where


class TransferFailed(OutboundError):
    """The connection was made but the exchange broke off; `kind` names the failure
    ("ReadError"), `detail` is its own words."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail or kind)
        self.kind = kind
        self.detail = detail


class ConnectFailed(TransferFailed):
    """No checked address of the host accepted a connection, or none finished the TLS
    handshake (`detail`: the last failure)."""

    def __init__(self, host: str, port: int, detail: str, kind: str = "ConnectError") -> None:
        super().__init__(kind, detail)
        self.host = host
        self.port = port


class TimedOut(TransferFailed):
    """The other side did not answer (or stopped sending) within the timeout."""
