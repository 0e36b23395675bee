"""Announcements: what a service tells gateways about itself and its tools.

An announcement is a registry document scoped to one service, published on
a persistent, compacted topic keyed ``"<id>@<instance>"``, with the
instance and its lease in the message's properties::

    {"tool-service": {"<id>": {"id": …, "request-queue": …, "response-queue": …, "config-params": […]}},
     "tool": {"<name>": {"type": "tool-service", "name": …, "service": "<id>", "input-schema": {…}}}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import wire

DEFAULT_LEASE = 8.0
"""A replica that crashed is let go by gateways at most this long (s) after
its last renewal; the service renews every third of it."""

TOOL_PARAM = "toolgate-tool"
"""The config param that names the tool a call is for. Every tool's
descriptor sets it to the tool's name, so that one service (one request
topic) serves several tools; a call without it goes to the service's only
tool."""


@dataclass(frozen=True)
class ConfigParam:
    """A configuration parameter the service takes (its tools set values)."""

    name: str
    required: bool = False


@dataclass(frozen=True)
class Announcement:
    """How a service announces itself; its tools are the service's own.

    ``lease`` (s): how long gateways hold the announcement without a
    renewal (0: :data:`DEFAULT_LEASE`; negative: no lease, held until
    withdrawn, even after a crash). ``timeout`` (s): the service's default
    call deadline (0: the gateway's).
    """

    topic: str = wire.DEFAULT_ANNOUNCE_TOPIC
    lease: float = 0.0
    timeout: float = 0.0
    config_params: Sequence[ConfigParam] = field(default_factory=tuple)

    def effective_lease(self) -> float:
        """The lease in seconds; 0 for none."""
        if self.lease < 0:
            return 0.0
        return self.lease or DEFAULT_LEASE


@dataclass(frozen=True)
class ToolSpec:
    """What gateways are told of one tool."""

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    task_support: str = ""
    result: str = ""


def payload(service_id: str, request_topic: str, response_topic: str, a: Announcement, tools: Sequence[ToolSpec]) -> bytes:
    """The announcement message of a service; raises ValueError on a tool
    gateways would refuse, or one over :data:`wire.MAX_ANNOUNCEMENT_BYTES`."""
    params: list[dict[str, Any]] = [{"name": p.name, "required": p.required} for p in a.config_params]
    if any(p.name == TOOL_PARAM for p in a.config_params):
        raise ValueError(f"config param {TOOL_PARAM!r} is the SDK's own")
    params.append({"name": TOOL_PARAM, "required": False})
    svc: dict[str, Any] = {
        "id": service_id,
        "request-queue": request_topic,
        "response-queue": response_topic,
        "config-params": params,
    }
    if a.timeout > 0:
        svc["timeout"] = wire.format_duration(a.timeout)
    descriptors: dict[str, Any] = {}
    for t in tools:
        if not t.name:
            raise ValueError("an announced tool has no name")
        if t.name in descriptors:
            raise ValueError(f"tool {t.name!r} announced twice")
        d: dict[str, Any] = dict(t.config)
        d.update(
            {
                "type": "tool-service",
                "name": t.name,
                "description": t.description,
                "service": service_id,
                TOOL_PARAM: t.name,
                "input-schema": dict(t.input_schema) if t.input_schema is not None else {"type": "object"},
            }
        )
        if t.task_support:
            d["task-support"] = t.task_support
        if t.result:
            d["result"] = t.result
        descriptors[t.name] = d
    doc = {"tool-service": {service_id: svc}, "tool": descriptors}
    try:
        b = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise ValueError(f"the announcement cannot be encoded as JSON: {e}") from e
    if len(b) > wire.MAX_ANNOUNCEMENT_BYTES:
        raise ValueError(
            f"the announcement is {len(b)} bytes, over the {wire.MAX_ANNOUNCEMENT_BYTES} a gateway reads:"
            " announce fewer or shorter tools"
        )
    return b
