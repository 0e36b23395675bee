"""MCP content: the reply of a tool announced with ``result="mcp-content"``.

Such a tool answers with a JSON array of MCP content blocks, which
:func:`content` writes from the blocks made here; a gateway's MCP door
returns them as the tool result's content (REST, gRPC and Connect return the
reply as it is). It may send log records while it runs (``Call.log``).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

RESULT_MCP_CONTENT = "mcp-content"
"""The ``result`` of a tool whose reply is MCP content."""


@dataclass(frozen=True)
class Block:
    """One MCP content block; make it with the functions of this module."""

    value: dict[str, Any]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def text(t: str) -> Block:
    """A block of text."""
    return Block({"type": "text", "text": t})


def _media(kind: str, data: bytes, mime_type: str) -> Block:
    if not data:
        raise ValueError(f"{kind} content has no data")
    if not mime_type:
        raise ValueError(f"{kind} content has no MIME type")
    return Block({"type": kind, "data": _b64(data), "mimeType": mime_type})


def image(data: bytes, mime_type: str) -> Block:
    """An image: its bytes (sent base64-encoded) and MIME type ("image/png")."""
    return _media("image", data, mime_type)


def audio(data: bytes, mime_type: str) -> Block:
    """A piece of audio: its bytes and MIME type ("audio/wav")."""
    return _media("audio", data, mime_type)


def resource(uri: str, t: str, mime_type: str = "") -> Block:
    """A resource embedded in the result: its URI, its text, its MIME type."""
    if not uri:
        raise ValueError("an embedded resource has no URI")
    if not t:
        raise ValueError("an embedded resource is empty")
    r: dict[str, Any] = {"uri": uri}
    if mime_type:
        r["mimeType"] = mime_type
    r["text"] = t
    return Block({"type": "resource", "resource": r})


def blob_resource(uri: str, blob: bytes, mime_type: str = "") -> Block:
    """A binary resource embedded in the result (its bytes sent base64-encoded)."""
    if not uri:
        raise ValueError("an embedded resource has no URI")
    if not blob:
        raise ValueError("an embedded resource is empty")
    r: dict[str, Any] = {"uri": uri}
    if mime_type:
        r["mimeType"] = mime_type
    r["blob"] = _b64(blob)
    return Block({"type": "resource", "resource": r})


def resource_link(uri: str, name: str, mime_type: str = "") -> Block:
    """A link to a resource the client may read: its URI, a name, its MIME type."""
    if not uri or not name:
        raise ValueError("a resource link needs a URI and a name")
    v: dict[str, Any] = {"type": "resource_link", "uri": uri, "name": name}
    if mime_type:
        v["mimeType"] = mime_type
    return Block(v)


def content(*blocks: Block) -> str:
    """The reply of an MCP content tool: the blocks, in order, as a JSON array."""
    for i, b in enumerate(blocks):
        if not isinstance(b, Block):
            raise TypeError(f"content[{i}] is a {type(b).__name__}, not a Block (make blocks with text, image, …)")
    return json.dumps([b.value for b in blocks], ensure_ascii=False, separators=(",", ":"))
