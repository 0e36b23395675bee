"""The tool-service wire contract, as the Go package ``wire`` defines it.

The JSON envelopes that travel over Apache Pulsar between a caller and a
tool service, the message properties that correlate them, toolgate's words
on a request (the ``toolgate-call`` property) and the topic naming rules.
Envelopes match TrustGraph's ``ToolServiceRequest`` / ``ToolServiceResponse``:
``config`` and ``arguments`` are JSON objects encoded as strings, every field
is always written, and unknown keys are ignored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# Message property names.
PROP_ID = "id"
"""Correlates a request with its replies; echoed on every reply."""
PROP_DEADLINE = "toolgate-deadline-ms"
"""The request's absolute deadline, in Unix milliseconds."""
PROP_TRACEPARENT = "traceparent"
PROP_SEQ = "toolgate-seq"
"""Numbers the reply messages of one call, from 0."""
PROP_REPLY_TO = "reply-to"
"""The topic the caller wants the replies on (its own reply topic)."""
PROP_CREDIT = "toolgate-credit"
"""Flow control: a request's first window, or a grant's new limit."""
PROP_FLOW = "toolgate-flow"
"""On the chunks of a flow-controlled stream: where this instance takes grants."""
PROP_RECEIPT = "toolgate-receipt"
"""On a request ("1"): asks for a receipt; on a receipt: marks it."""
PROP_CALL = "toolgate-call"
"""toolgate's words on a request, in one property (see :func:`expand_call`)."""
PROP_INSTANCE = "toolgate-instance"
"""Names the instance (replica) of a service: on announcements and replies."""
PROP_LEASE = "toolgate-lease"
"""How long an announcement holds unless made again (a Go duration)."""
PROP_WITHDRAWN = "toolgate-withdrawn"
"""Marks a withdrawal: an empty message with the key of what it withdraws."""

RECEIPT_AFTER = 0.25
"""Seconds an instance waits for a call's first reply before sending a receipt."""
CREDIT_CANCEL = "cancel"
"""The credit of a grant that ends the call: the caller is gone."""
CREDIT_RESEND = "resend"
"""The credit of a message asking for a call's last reply once more."""
ERROR_TYPE_TOOL_SERVICE = "tool-service-error"
"""What TrustGraph's Python services report for any exception."""

DEFAULT_ANNOUNCE_TOPIC = "persistent://tg/config/tool-descriptors"
MAX_ANNOUNCEMENT_BYTES = 1 << 20
RESULT_MCP_CONTENT = "mcp-content"

TENANT = "tg"
REQUEST_NAMESPACE = "request"
RESPONSE_NAMESPACE = "response"
UNKNOWN_ID = "unknown"
"""The id a reply to a request without one carries (as the Python base class)."""


class MalformedError(ValueError):
    """A payload that is not a JSON object of the expected shape."""


# --- toolgate's words (PROP_CALL) --------------------------------------------

_WORDS = {
    "reply-to": PROP_REPLY_TO,
    "credit": PROP_CREDIT,
    "deadline-ms": PROP_DEADLINE,
    "receipt": PROP_RECEIPT,
}


@dataclass(frozen=True)
class CallWords:
    """A request's toolgate words; empty (0, False) for one not set."""

    reply_to: str = ""
    credit: int = 0
    deadline_ms: int = 0
    receipt: bool = False


def format_call(w: CallWords) -> str:
    """The ``toolgate-call`` value of ``w``: ``"reply-to=T;credit=N;…"``."""
    words = []
    if w.reply_to:
        words.append("reply-to=" + w.reply_to)
    if w.credit > 0:
        words.append(f"credit={w.credit}")
    if w.deadline_ms > 0:
        words.append(f"deadline-ms={w.deadline_ms}")
    if w.receipt:
        words.append("receipt=1")
    return ";".join(words)


def expand_call(props: dict[str, str]) -> dict[str, str]:
    """``props`` with ``toolgate-call``'s words as properties of their own.

    Returns a new dict, or ``props`` itself when it has no ``toolgate-call``.
    A word the property gives replaces the property of the same meaning; a
    malformed or unknown word is ignored (as ``wire.ExpandCall`` does).
    """
    packed = props.get(PROP_CALL)
    if packed is None:
        return props
    out = dict(props)
    for word in packed.split(";"):
        name, eq, value = word.partition("=")
        if not eq or not value:
            continue
        prop = _WORDS.get(name)
        if prop is not None:
            out[prop] = value
    return out


# --- numbers in properties ----------------------------------------------------

_INT_RE = re.compile(r"[+-]?[0-9]{1,19}")
_INT64_MAX = (1 << 63) - 1


def parse_int(s: str) -> int | None:
    """An integer property value as Go's ``strconv.Atoi`` reads it, else None."""
    if _INT_RE.fullmatch(s) is None:
        return None
    n = int(s)
    if not -_INT64_MAX - 1 <= n <= _INT64_MAX:
        return None
    return n


def parse_deadline(s: str) -> float | None:
    """A ``toolgate-deadline-ms`` value as Unix seconds, None if invalid."""
    n = parse_int(s)
    if n is None or n <= 0:
        return None
    return n / 1000.0


def format_duration(seconds: float) -> str:
    """``seconds`` as a Go duration (``"8s"``, ``"1500ms"``)."""
    ms = round(seconds * 1000)
    if ms % 1000 == 0:
        return f"{ms // 1000}s"
    return f"{ms}ms"


# --- topics ---------------------------------------------------------------------

_ENTITY_RE = re.compile(r"[A-Za-z0-9_.\-=]+")
_LOCAL_RE = re.compile(r"[A-Za-z0-9_.\-=:]+")


def request_topic(topic: str) -> str:
    """The request topic of a short ``topic``: ``non-persistent://tg/request/<topic>``."""
    return f"non-persistent://{TENANT}/{REQUEST_NAMESPACE}/{topic}"


def response_topic(topic: str) -> str:
    """The response topic of a short ``topic``."""
    return f"non-persistent://{TENANT}/{RESPONSE_NAMESPACE}/{topic}"


def validate_topic(name: str) -> None:
    """Raise ValueError unless ``name`` is a full Pulsar topic name."""
    scheme, sep, rest = name.partition("://")
    if not sep or scheme not in ("persistent", "non-persistent"):
        raise ValueError(f"topic {name!r} must start with persistent:// or non-persistent://")
    parts = rest.split("/")
    if len(parts) != 3:
        raise ValueError(f"topic {name!r} must have the form {scheme}://tenant/namespace/topic")
    for what, part, pattern in (
        ("tenant", parts[0], _ENTITY_RE),
        ("namespace", parts[1], _ENTITY_RE),
        ("topic", parts[2], _LOCAL_RE),
    ):
        if pattern.fullmatch(part) is None:
            raise ValueError(f"topic {name!r} has an invalid {what} {part!r}")


def expand_queue(q: str) -> str:
    """A queue name as TrustGraph writes it, as a full topic name.

    Full names are kept; ``class:tenant:name`` becomes
    ``non-persistent://tenant/class/name`` (``persistent://`` for class
    ``flow``). Raises ValueError when the result is not a valid topic.
    """
    if "://" in q:
        validate_topic(q)
        return q
    parts = q.split(":")
    if len(parts) != 3:
        raise ValueError(
            f"queue {q!r} is neither a full topic name (non-persistent://tenant/namespace/topic)"
            " nor of the form class:tenant:name"
        )
    scheme = "persistent" if parts[0] == "flow" else "non-persistent"
    full = f"{scheme}://{parts[1]}/{parts[0]}/{parts[2]}"
    validate_topic(full)
    return full


def _valid_topic(name: str) -> bool:
    try:
        validate_topic(name)
    except ValueError:
        return False
    return True


def reply_to_allowed(reply_to: str, response: str) -> bool:
    """Whether a service answering on ``response`` may answer on ``reply_to``.

    Only a valid topic of the same tenant and namespace (or that
    namespace's persistent twin) is allowed, so that a caller cannot have
    replies sent anywhere else.
    """
    if reply_to == response:
        return True
    i = response.rfind("/")
    if i < 0:
        return False
    ns = response[: i + 1]
    if not reply_to.startswith(ns):
        if not ns.startswith("non-persistent://"):
            return False
        ns = "persistent://" + ns[len("non-persistent://") :]
        if not reply_to.startswith(ns):
            return False
    local = reply_to[len(ns) :]
    return local != "" and "/" not in local and _valid_topic(reply_to)


def flow_topic(request: str, instance: str) -> str:
    """Where one instance of the service on ``request`` takes grants."""
    _, _, rest = request.partition("://")
    return f"non-persistent://{rest}.flow-{instance}"


def cancel_topic(request: str) -> str:
    """Where every instance of the service on ``request`` hears cancels."""
    _, _, rest = request.partition("://")
    return f"non-persistent://{rest}.cancel"


def announce_key(service_id: str, instance: str) -> str:
    """The key of one instance's announcements: ``"<id>@<instance>"``."""
    return f"{service_id}@{instance}" if instance else service_id


# --- envelopes ------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """The envelope a caller publishes on a request topic."""

    user: str = ""
    config: str = ""
    arguments: str = ""


@dataclass(frozen=True)
class Error:
    """A failure reported by a tool service."""

    type: str
    message: str


@dataclass(frozen=True)
class Response:
    """One reply message; the last one has ``end_of_stream`` set."""

    response: str = ""
    error: Error | None = None
    end_of_stream: bool = False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(b: bytes | str) -> Any:
    try:
        return json.loads(b, parse_constant=_no_constant)
    except RecursionError as e:
        raise ValueError("nested too deeply") from e


def _object(b: bytes) -> dict[str, Any]:
    stripped = b.lstrip(b" \t\r\n")
    if not stripped.startswith(b"{"):
        raise MalformedError("not a JSON object")
    try:
        v = _loads(b)
    except ValueError as e:
        raise MalformedError(str(e)) from e
    if not isinstance(v, dict):
        raise MalformedError("not a JSON object")
    return v


def encode_request(r: Request) -> bytes:
    """The JSON payload of ``r``; empty config or arguments are ``"{}"``."""
    return _dumps({"user": r.user, "config": r.config or "{}", "arguments": r.arguments or "{}"})


def decode_request(b: bytes) -> Request:
    """Parse a request payload; raises MalformedError."""
    v = _object(b)
    fields: dict[str, str] = {}
    for k in ("user", "config", "arguments"):
        x = v.get(k)
        if x is None:
            fields[k] = ""
        elif isinstance(x, str):
            fields[k] = x
        else:
            raise MalformedError(f"{k!r} must be a string")
    return Request(**fields)


def _dumps(v: Any) -> bytes:
    s = json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate: escaped, the reader makes it U+FFFD.
        return json.dumps(v, separators=(",", ":")).encode("ascii")


def encode_response(r: Response) -> bytes:
    """The JSON payload of ``r``, in the Go SDK's shape and key order."""
    err = None if r.error is None else {"type": r.error.type, "message": r.error.message}
    return _dumps({"error": err, "response": r.response, "end_of_stream": r.end_of_stream})


def decode_response(b: bytes) -> Response:
    """Parse a reply payload; raises MalformedError."""
    v = _object(b)
    text = v.get("response")
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise MalformedError("'response' must be a string")
    eos = v.get("end_of_stream")
    if eos is None:
        eos = False
    if not isinstance(eos, bool):
        raise MalformedError("'end_of_stream' must be true or false")
    err = v.get("error")
    error: Error | None = None
    if err is not None:
        if not isinstance(err, dict):
            raise MalformedError("'error' must be an object")
        typ, msg = err.get("type", ""), err.get("message", "")
        typ, msg = "" if typ is None else typ, "" if msg is None else msg
        if not isinstance(typ, str) or not isinstance(msg, str):
            raise MalformedError("'error' must hold strings")
        if typ or msg:
            error = Error(typ, msg)
    return Response(response=text, error=error, end_of_stream=eos)


def decode_object(s: str) -> dict[str, Any]:
    """A request's ``config`` or ``arguments``: a JSON object (``{}`` when blank)."""
    if not s.strip():
        return {}
    try:
        v = _loads(s)
    except ValueError as e:
        raise MalformedError(f"not a JSON object: {e}") from e
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise MalformedError("not a JSON object")
    return v
