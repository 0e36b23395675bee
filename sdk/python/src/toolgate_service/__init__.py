"""toolgate-service: write tool services in Python, for toolgate and TrustGraph.

A tool service takes tool calls from an Apache Pulsar request topic and
answers them, speaking the wire format of TrustGraph's Python
``DynamicToolService`` and the whole contract of toolgate's Go SDK
(``toolservice``): replies on the caller's own reply topic (``reply-to``),
numbered chunks under the caller's credit, receipts and kept replies for
requests published again, cancels, and announcements of each instance
with a lease, withdrawn on a graceful stop. See :class:`Service`.
"""

from . import content
from .announce import DEFAULT_LEASE, TOOL_PARAM, Announcement, ConfigParam
from .errors import Abandoned, CallerGone, PublishError, QueueFull, ToolError
from .main import EXIT_ABANDONED, serve
from .service import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_STOP_GRACE,
    STOP_MARGIN,
    Call,
    Config,
    Service,
    Stats,
    Tool,
)
from .text import to_text

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_STOP_GRACE",
    "EXIT_ABANDONED",
    "STOP_MARGIN",
    "TOOL_PARAM",
    "Abandoned",
    "Announcement",
    "Call",
    "CallerGone",
    "Config",
    "ConfigParam",
    "PublishError",
    "QueueFull",
    "Service",
    "Stats",
    "Tool",
    "ToolError",
    "content",
    "serve",
    "to_text",
]
