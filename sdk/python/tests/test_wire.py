"""The wire contract: the cases of the Go package wire's tests, and more."""

from __future__ import annotations

import json
import random
import string

import pytest

from toolgate_service import wire


@pytest.mark.parametrize(
    "words",
    [
        wire.CallWords(),
        wire.CallWords(reply_to="non-persistent://tg/response/toolgate-reply-gw-1"),
        wire.CallWords(credit=64),
        wire.CallWords(deadline_ms=1765000000123),
        wire.CallWords(receipt=True),
        wire.CallWords(reply_to="non-persistent://tg/response/r", credit=1024, deadline_ms=1765000000123, receipt=True),
    ],
)
def test_call_words_round_trip(words: wire.CallWords) -> None:
    packed = wire.format_call(words)
    props = {wire.PROP_ID: "c1"}
    if packed:
        props[wire.PROP_CALL] = packed
    want = dict(props)
    if words.reply_to:
        want[wire.PROP_REPLY_TO] = words.reply_to
    if words.credit:
        want[wire.PROP_CREDIT] = str(words.credit)
    if words.deadline_ms:
        want[wire.PROP_DEADLINE] = "1765000000123"
    if words.receipt:
        want[wire.PROP_RECEIPT] = "1"
    assert wire.expand_call(props) == want
    if not packed:
        assert wire.expand_call(props) is props


def test_format_call_matches_go() -> None:
    # wire.AppendCall's order: reply-to, credit, deadline-ms, receipt.
    w = wire.CallWords(reply_to="non-persistent://tg/response/r", credit=1024, deadline_ms=5, receipt=True)
    assert wire.format_call(w) == "reply-to=non-persistent://tg/response/r;credit=1024;deadline-ms=5;receipt=1"


def test_expand_call() -> None:
    # Without the property the dict is returned as it is (an older caller's
    # words stay where they are).
    old = {wire.PROP_ID: "a", wire.PROP_CREDIT: "8"}
    assert wire.expand_call(old) is old
    given = {
        wire.PROP_ID: "a",
        wire.PROP_CREDIT: "8",
        wire.PROP_CALL: "credit=16;bogus;=x;receipt=;later-word=7;deadline-ms=5",
    }
    got = wire.expand_call(given)
    # The packed word counts; malformed and unknown words are ignored.
    assert got == {
        wire.PROP_ID: "a",
        wire.PROP_CREDIT: "16",
        wire.PROP_DEADLINE: "5",
        wire.PROP_CALL: given[wire.PROP_CALL],
    }
    assert given[wire.PROP_CREDIT] == "8" and len(given) == 3, "the message's own dict was changed"


def test_expand_call_value_keeps_equals_signs() -> None:
    got = wire.expand_call({wire.PROP_CALL: "reply-to=a=b;;"})
    assert got[wire.PROP_REPLY_TO] == "a=b"


def test_expand_call_random() -> None:
    # As FuzzExpandCall: the message's own properties stay, and every word
    # taken is a non-empty piece of the packed value without a ";".
    rng = random.Random(7)
    alphabet = string.ascii_letters + "=;-:/" * 4
    seeds = ["reply-to=non-persistent://tg/response/r;credit=1024;deadline-ms=1765000000123;receipt=1", ";;==;credit"]
    for i in range(3000):
        packed = seeds[i] if i < len(seeds) else "".join(rng.choice(alphabet) for _ in range(rng.randrange(40)))
        got = wire.expand_call({wire.PROP_ID: "x", wire.PROP_CALL: packed})
        assert got[wire.PROP_ID] == "x" and got[wire.PROP_CALL] == packed
        for k in (wire.PROP_REPLY_TO, wire.PROP_CREDIT, wire.PROP_DEADLINE, wire.PROP_RECEIPT):
            if k in got:
                v = got[k]
                assert v and ";" not in v and v in packed, (k, v, packed)


@pytest.mark.parametrize(
    ("reply_to", "allowed"),
    [
        ("non-persistent://tg/response/toolgate.gw-1", True),
        ("non-persistent://tg/response/joke", True),
        ("non-persistent://tg/request/joke", False),  # another namespace
        ("persistent://tg/response/toolgate.gw-1", True),  # the persistent twin of the namespace
        ("persistent://tg/request/joke", False),
        ("persistent://other/response/x", False),
        ("persistent://tg/response/a/b", False),
        ("non-persistent://other/response/x", False),  # another tenant
        ("non-persistent://tg/response/", False),
        ("non-persistent://tg/response/a/b", False),
        ("non-persistent://tg/response/a b", False),
        ("non-persistent://tg/response/a\n", False),
        ("tg/response/x", False),
    ],
)
def test_reply_to_allowed(reply_to: str, allowed: bool) -> None:
    assert wire.reply_to_allowed(reply_to, "non-persistent://tg/response/joke") is allowed


def test_operations_topic_allowed() -> None:
    ops = "persistent://tg/response/toolgate.operations"
    assert wire.reply_to_allowed(ops, wire.response_topic("echo"))
    assert not wire.reply_to_allowed(ops, "persistent://tg/other/echo")


@pytest.mark.parametrize(
    ("queue", "want", "error"),
    [
        ("request:tg:joke", "non-persistent://tg/request/joke", ""),
        ("response:tg:joke", "non-persistent://tg/response/joke", ""),
        ("flow:tg:x", "persistent://tg/flow/x", ""),
        ("non-persistent://tg/request/joke", "non-persistent://tg/request/joke", ""),
        ("persistent://public/default/a-b.c", "persistent://public/default/a-b.c", ""),
        ("joke", "", "neither a full topic name"),
        ("http://a/b/c", "", "must start with persistent://"),
        ("non-persistent://tg/request", "", "tenant/namespace/topic"),
        ("non-persistent://tg/req uest/x", "", "invalid namespace"),
        ("request:tg:", "", "invalid topic"),
    ],
)
def test_expand_queue(queue: str, want: str, error: str) -> None:
    if error:
        with pytest.raises(ValueError, match=error):
            wire.expand_queue(queue)
    else:
        assert wire.expand_queue(queue) == want


def test_short_topics() -> None:
    assert wire.request_topic("joke") == "non-persistent://tg/request/joke"
    assert wire.response_topic("joke") == "non-persistent://tg/response/joke"
    assert wire.flow_topic("non-persistent://tg/request/joke", "ab12") == "non-persistent://tg/request/joke.flow-ab12"
    assert wire.cancel_topic("non-persistent://tg/request/joke") == "non-persistent://tg/request/joke.cancel"
    assert wire.announce_key("echo", "ab12") == "echo@ab12"
    assert wire.announce_key("echo", "") == "echo"


def test_deadline_property() -> None:
    assert wire.parse_deadline("1767000000123") == 1767000000.123
    for bad in ("", "soon", "-5", "0", " 5", "5_000", "1" * 30):
        assert wire.parse_deadline(bad) is None, bad


def test_parse_int_like_atoi() -> None:
    assert wire.parse_int("+8") == 8
    assert wire.parse_int("-3") == -3
    assert wire.parse_int("9223372036854775807") == (1 << 63) - 1
    for bad in ("", "9223372036854775808", "1e3", "٣", "0x10", "1 "):
        assert wire.parse_int(bad) is None, bad


def test_format_duration() -> None:
    assert wire.format_duration(8) == "8s"
    assert wire.format_duration(1.5) == "1500ms"
    assert wire.format_duration(0.25) == "250ms"


def test_encode_request() -> None:
    assert wire.encode_request(wire.Request(user="alice")) == b'{"user":"alice","config":"{}","arguments":"{}"}'
    got = wire.encode_request(wire.Request(user="u", config='{"style": "pun"}', arguments='{"topic":"x"}'))
    assert got == b'{"user":"u","config":"{\\"style\\": \\"pun\\"}","arguments":"{\\"topic\\":\\"x\\"}"}'


def test_decode_request() -> None:
    assert wire.decode_request(b' {"user": "a", "arguments": "{}", "extra": 1}') == wire.Request(user="a", arguments="{}")
    assert wire.decode_request(b'{"user": null}') == wire.Request()
    for bad in (b"", b"[]", b'"x"', b"{", b'{"config": {}}', b'{"user": 1}', b"\xff{}"):
        with pytest.raises(wire.MalformedError):
            wire.decode_request(bad)


@pytest.mark.parametrize(
    ("payload", "want"),
    [
        ('{"error": null, "response": "hi", "end_of_stream": true}', wire.Response("hi", None, True)),
        (
            '{"error": {"type": "tool-service-error", "message": "boom"}, "response": "", "end_of_stream": true}',
            wire.Response("", wire.Error("tool-service-error", "boom"), True),
        ),
        ('{"response": "chunk"}', wire.Response("chunk")),
        ('{"response": "x", "end_of_stream": true, "extra": [1]}', wire.Response("x", None, True)),
        ('{"error": {}, "response": "x", "end_of_stream": true}', wire.Response("x", None, True)),
    ],
)
def test_decode_response(payload: str, want: wire.Response) -> None:
    assert wire.decode_response(payload.encode()) == want


@pytest.mark.parametrize("payload", ["oops", "[]", '"x"', '{"response": 1}', '{"error": "boom"}', "", '{"error": {"type": 0}}'])
def test_decode_response_malformed(payload: str) -> None:
    with pytest.raises(wire.MalformedError):
        wire.decode_response(payload.encode())


def test_encode_response_is_go_shaped() -> None:
    # The shape wire.EncodeResponse writes (the gateway reads it without a
    # JSON decoder when its text is plain ASCII).
    assert wire.encode_response(wire.Response("0,")) == b'{"error":null,"response":"0,","end_of_stream":false}'
    assert (
        wire.encode_response(wire.Response("", wire.Error("t", 'a "q"\n'), True))
        == b'{"error":{"type":"t","message":"a \\"q\\"\\n"},"response":"","end_of_stream":true}'
    )
    assert wire.encode_response(wire.Response("é<&>")) == '{"error":null,"response":"é<&>","end_of_stream":false}'.encode()
    # A lone surrogate is escaped (the reader makes it U+FFFD), not a failure.
    assert json.loads(wire.encode_response(wire.Response("\ud800")))["response"] == "\ud800"


def test_encode_response_round_trip() -> None:
    rng = random.Random(3)
    for _ in range(500):
        text = "".join(chr(rng.choice([rng.randrange(0x20), rng.randrange(0x80), rng.randrange(0x3000)])) for _ in range(8))
        r = wire.Response(text, wire.Error(text, text[::-1]) if rng.random() < 0.3 else None, rng.random() < 0.5)
        assert wire.decode_response(wire.encode_response(r)) == r


def test_decode_object() -> None:
    assert wire.decode_object("") == {}
    assert wire.decode_object(" ") == {}
    assert wire.decode_object("null") == {}
    assert wire.decode_object('{"big": 123456789012345678}') == {"big": 123456789012345678}
    for bad in ("[1]", '{"a": 1} {"b": 2}', '{"a":', '{"a": NaN}', '{"a": Infinity}', "[" * 100000 + "]" * 100000):
        with pytest.raises(wire.MalformedError):
            wire.decode_object(bad)
