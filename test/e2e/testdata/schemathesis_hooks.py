"""Schemathesis hooks for test/e2e/schemathesis_test.go.

An application/x-ndjson answer of StreamTool is one JSON value per line;
the OpenAPI document's schema (StreamLine) is that of one line. This
deserializer checks every line against it: chunks in order, counted from 0,
the last one marked last, or a Status as the last line of a stream that
failed. It returns the last line, which schemathesis validates again.

TOOLGATE_OPENAPI names the document (the file schemathesis reads).
"""

import json
import os

import schemathesis
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

_DOC_URI = "urn:toolgate:openapi"


def _validator():
    with open(os.environ["TOOLGATE_OPENAPI"], encoding="utf-8") as f:
        doc = json.load(f)
    registry = Registry().with_resource(
        _DOC_URI, Resource.from_contents(doc, default_specification=DRAFT202012)
    )
    return Draft202012Validator(
        {"$ref": _DOC_URI + "#/components/schemas/StreamLine"}, registry=registry
    )


_LINE = _validator()


@schemathesis.deserializer("application/x-ndjson")
def ndjson(ctx, response):
    lines = [line for line in response.content.decode("utf-8").split("\n") if line.strip()]
    if not lines:
        raise ValueError("an NDJSON stream without a line")
    values = []
    for i, line in enumerate(lines):
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"line {i} is not JSON: {exc}: {line!r}") from exc
        errors = sorted(_LINE.iter_errors(value), key=str)
        if errors:
            raise ValueError(f"line {i} is not a StreamLine: {errors[0].message}: {line!r}")
        values.append(value)
    for i, value in enumerate(values):
        if "code" in value:
            if i != len(values) - 1:
                raise ValueError(f"line {i} is a Status before the end of the stream")
            continue
        if value["index"] != str(i):
            raise ValueError(f"line {i} has index {value['index']}")
        if value["last"] != (i == len(values) - 1):
            raise ValueError(f"line {i} has last={value['last']}")
    return values[-1]


def _arguments_json_ok(body):
    """What JSON Schema cannot check of a call body: arguments_json, when
    set, is a JSON object's text (the document says so with
    contentMediaType and contentSchema, which are annotations). That it
    replaces arguments, not both, the body schema's `not` says."""
    if not isinstance(body, dict):
        return True
    text = body.get("arguments_json")
    if not isinstance(text, str) or text == "":
        return True
    try:
        return isinstance(json.loads(text, parse_constant=_refuse, object_pairs_hook=_unique), dict)
    except ValueError:
        return False


def _refuse(name):
    raise ValueError(f"{name} is not JSON")


def _unique(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a repeated key")
    return dict(pairs)


@schemathesis.hook
def filter_body(ctx, body):
    return _arguments_json_ok(body)


@schemathesis.hook
def filter_case(ctx, case):
    # The coverage phase applies case hooks, not body hooks.
    return _arguments_json_ok(case.body)
