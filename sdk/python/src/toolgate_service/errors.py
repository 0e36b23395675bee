"""The exceptions of the SDK."""

from __future__ import annotations


class ToolError(Exception):
    """A failure with a type the caller can act on.

    Raise it from a tool: the caller receives ``{"type": type, "message":
    message}``. The gateway maps well-known types to its own codes:
    ``invalid-argument``, ``not-found``, ``permission-denied``,
    ``too-many-requests``, ``timeout``, ``unavailable``. Any other
    exception reaches the caller as type ``tool-service-error`` with the
    exception's text, as TrustGraph's services report it.
    """

    def __init__(self, type: str, message: str = "") -> None:
        super().__init__(f"{type}: {message}" if message else type)
        self.type = type
        self.message = message


class CallerGone(Exception):
    """The caller gave the call up: nobody reads what the tool sends now."""

    def __init__(self) -> None:
        super().__init__("the caller has given the call up")


class PublishError(Exception):
    """The broker did not take a message."""


class QueueFull(PublishError):
    """The producer's queue of messages awaiting the broker's receipt is full."""


class Abandoned(Exception):
    """A stop reached its deadline before everything had closed.

    :meth:`Service.run` raises it when subscriptions, producers, the client
    or calls were still open ``stop_grace`` + 2 s after the stop began (the
    broker does not answer); the service has stopped all the same. The
    example services exit with status 3.
    """
