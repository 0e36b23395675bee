"""What an instance keeps is bounded: cancels, kept replies, log lines."""

from __future__ import annotations

import logging

import pytest

from toolgate_service import state
from toolgate_service.transport import Message


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_calls_and_early_cancels() -> None:
    clock = Clock()
    calls = state.Calls(clock)
    ended: list[str] = []
    assert calls.start("a", lambda: ended.append("a"))
    assert calls.cancel("a") and ended == ["a"]
    assert not calls.cancel("b"), "b does not run here"
    assert not calls.start("b", lambda: None), "a cancel that came first ends the call before it starts"
    assert calls.early() == 0
    # Old cancels go; at most CANCELS_MAX are kept.
    calls.cancel("old")
    clock.now += state.CANCEL_KEEP + 1
    calls.cancel("new")
    assert calls.early() == 1
    for i in range(state.CANCELS_MAX + 100):
        calls.cancel(f"flood-{i}")
    assert calls.early() == state.CANCELS_MAX


def test_calls_end_only_its_own() -> None:
    calls = state.Calls()

    def first() -> None:
        pass

    def second() -> None:
        pass

    calls.start("x", first)
    calls.start("x", second)  # the same id again (no receipts asked)
    calls.end("x", first)
    assert len(calls) == 1, "the first call's end forgot the second"
    calls.end("x", second)
    assert len(calls) == 0


def test_recent_replies_bounds() -> None:
    clock = Clock()
    r = state.RecentReplies(clock)
    r.keep("a", "t", Message(payload=b"x" * 10))
    k = r.take("a")
    assert k is not None and k.topic == "t"
    clock.now += state.RECENT_TTL
    assert r.take("a") is None, "a reply kept past its time"
    r.keep("big", "t", Message(payload=b"x" * (state.RECENT_MAX_MESSAGE + 1)))
    assert r.take("big") is None
    for i in range(state.RECENT_MAX + 10):
        r.keep(f"c{i}", "t", Message(payload=b"x"))
    assert len(r) == state.RECENT_MAX and r.take("c0") is None and r.take(f"c{state.RECENT_MAX + 9}") is not None
    r2 = state.RecentReplies(clock)
    for i in range(40):
        r2.keep(f"m{i}", "t", Message(payload=b"x" * state.RECENT_MAX_MESSAGE))
    assert r2.bytes <= state.RECENT_MAX_BYTES
    r2.keep("m39", "t", Message(payload=b"y"))  # answered twice: the later kept
    k = r2.take("m39")
    assert k is not None and k.msg.payload == b"y"


def test_rate_log(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    log = state.RateLog(logging.getLogger("ratelog-test"), every=30, clock=clock)
    with caplog.at_level(logging.WARNING, logger="ratelog-test"):
        for _ in range(5):
            log.warning("kind", "bad request %s", "x")
        log.warning("other", "another kind")
        clock.now += 31
        log.warning("kind", "bad request %s", "y")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["bad request x", "another kind", "bad request y (4 more like it since the last line)"]


def test_client_log_filter(caplog: pytest.LogCaptureFixture) -> None:
    from toolgate_service.pulsar_broker import ClientLogFilter

    log = logging.getLogger("client-filter-test")
    f = ClientLogFilter(every=0.2)
    log.addFilter(f)
    try:
        with caplog.at_level(logging.WARNING, logger="client-filter-test"):
            for port in range(5):
                log.error("Failed to establish connection to 127.0.0.1:%d: Connection refused", 6650 + port)
            log.error("another thing")
            import time

            time.sleep(0.25)
            log.error("Failed to establish connection to 127.0.0.1:%d: Connection refused", 7000)
    finally:
        log.removeFilter(f)
    assert [r.getMessage() for r in caplog.records] == [
        "Failed to establish connection to 127.0.0.1:6650: Connection refused",
        "another thing",
        "Failed to establish connection to 127.0.0.1:7000: Connection refused (4 more like it since the last line)",
    ]
