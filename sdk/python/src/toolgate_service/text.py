"""What a tool's result becomes on the wire: the reply's text."""

from __future__ import annotations

import json
from typing import Any


def to_text(value: Any) -> str:
    """The reply text of a tool's result, as the Go SDK's ``Text`` makes it.

    A string is sent as it is, ``None`` as the empty string, bytes as UTF-8
    text, anything else as JSON written the way ``json.dumps`` writes it by
    default (``", "`` and ``": "`` separators, non-ASCII escaped): the form
    TrustGraph's services and the Go SDK answer in. Raises TypeError or
    ValueError for a value JSON cannot hold.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return json.dumps(value, allow_nan=False)
