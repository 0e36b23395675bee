"""What an instance remembers of its calls, each bounded: the calls
running and the cancels that came before their request, the last reply of
recent calls (for a caller that asks for it again), and a log that says a
thing an outsider can cause at most once an interval."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .transport import Message

CANCEL_KEEP = 120.0
"""How long a cancel for a call not started here is kept (s): its request
may still be on its way (they travel on different topics)."""
CANCELS_MAX = 65536
"""Cancels kept at most (the Go SDK: 16 shards of 4,096)."""

RECENT_MAX = 4096
"""Replies kept at most for a resend."""
RECENT_MAX_BYTES = 8 << 20
"""Their payloads together, at most."""
RECENT_MAX_MESSAGE = 256 << 10
"""A larger reply is not kept."""
RECENT_TTL = 60.0
"""How long a reply is kept (s)."""
RECENT_GIVE = 3
"""How many times a kept reply is given out at most."""


class Calls:
    """The calls running on this instance, and early cancels."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._running: dict[str, Callable[[], None]] = {}
        self._early: OrderedDict[str, float] = OrderedDict()
        self._clock = clock

    def start(self, call_id: str, give_up: Callable[[], None]) -> bool:
        """Note a call about to run, with what ends it; False when it was
        given up already."""
        if self._early.pop(call_id, None) is not None:
            return False
        self._running[call_id] = give_up
        return True

    def end(self, call_id: str, give_up: Callable[[], None]) -> None:
        """Forget a call that has ended (if it is still the one noted)."""
        if self._running.get(call_id) is give_up:
            del self._running[call_id]

    def cancel(self, call_id: str) -> bool:
        """End the call if it runs here, else keep the cancel a while in case
        its request is still to come. Reports whether the call ran here."""
        give_up = self._running.pop(call_id, None)
        if give_up is not None:
            give_up()
            return True
        now = self._clock()
        while self._early:
            oldest, at = next(iter(self._early.items()))
            if now - at <= CANCEL_KEEP and len(self._early) < CANCELS_MAX:
                break
            del self._early[oldest]
        self._early[call_id] = now
        self._early.move_to_end(call_id)
        return False

    def __len__(self) -> int:
        return len(self._running)

    def early(self) -> int:
        """How many cancels are kept for calls not started here."""
        return len(self._early)


@dataclass
class Kept:
    """A reply kept for a resend: where it went and what it was."""

    topic: str
    msg: Message
    at: float
    given: int = 0


class RecentReplies:
    """The last reply message of recent calls, bounded in count, bytes and age."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._by_id: OrderedDict[str, Kept] = OrderedDict()
        self._bytes = 0
        self._clock = clock

    def _drop(self, call_id: str) -> None:
        k = self._by_id.pop(call_id)
        self._bytes -= len(k.msg.payload)

    def _expire(self, now: float) -> None:
        while self._by_id:
            oldest, k = next(iter(self._by_id.items()))
            if now - k.at < RECENT_TTL:
                return
            self._drop(oldest)

    def keep(self, call_id: str, topic: str, msg: Message) -> None:
        """Note ``msg``, the last reply of the call, sent to ``topic``."""
        if len(msg.payload) > RECENT_MAX_MESSAGE:
            return
        now = self._clock()
        self._expire(now)
        if call_id in self._by_id:  # answered twice: the later reply, queued anew
            self._drop(call_id)
        self._by_id[call_id] = Kept(topic, msg, now)
        self._bytes += len(msg.payload)
        while len(self._by_id) > RECENT_MAX or self._bytes > RECENT_MAX_BYTES:
            self._drop(next(iter(self._by_id)))

    def take(self, call_id: str) -> Kept | None:
        """The reply kept for the call, unless too old or given out
        :data:`RECENT_GIVE` times already."""
        self._expire(self._clock())
        k = self._by_id.get(call_id)
        if k is None:
            return None
        k.given += 1
        if k.given >= RECENT_GIVE:
            self._drop(call_id)
        return k

    def __len__(self) -> int:
        return len(self._by_id)

    @property
    def bytes(self) -> int:
        """The payloads kept, together."""
        return self._bytes


class RateLog:
    """A logger's warnings, one line per kind an interval, then one with the
    count of those left out: for what outsiders can cause at will."""

    def __init__(self, log: logging.Logger, every: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = log
        self._every = every
        self._clock = clock
        self._last: dict[str, tuple[float, int]] = {}

    def warning(self, kind: str, msg: str, *args: Any) -> None:
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last[0] < self._every:
            self._last[kind] = (last[0], last[1] + 1)
            return
        if len(self._last) > 256:
            self._last.clear()
        skipped = 0 if last is None else last[1]
        self._last[kind] = (now, 0)
        if skipped:
            msg += " (%d more like it since the last line)"
            args = (*args, skipped)
        self._log.warning(msg, *args)
