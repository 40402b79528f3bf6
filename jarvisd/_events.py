"""The event bus: typed events, synchronous fan-out, subscribers that cannot break a run."""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event", "EventBus", "EventType", "Subscriber"]

log = logging.getLogger(__name__)


class EventType(enum.StrEnum):
    AGENT_TURN_START = "agent_turn_start"
    AGENT_TURN_END = "agent_turn_end"
    TOOL_CALL_START = "tool_call_start"
    TOOL_CALL_END = "tool_call_end"
    INFERENCE_START = "inference_start"
    INFERENCE_END = "inference_end"
    INFERENCE_DELTA = "inference_delta"
    RUN_START = "run_start"
    RUN_END = "run_end"
    # Composition patterns (jarvisd.patterns); every one carries ``pattern`` (the
    # pattern's name) and ``depth``, and its own fields (see jarvisd.patterns._base).
    ROUTE_CHOSEN = "route_chosen"
    MEMBER_START = "member_start"
    MEMBER_END = "member_end"
    ROUND = "round"
    HANDOFF = "handoff"
    STEP = "step"
    #: A run's ledger reached ``warn_at`` of one of its caps (once per dimension).
    BUDGET_WARNING = "budget_warning"
    #: An external agent's plan (its entries, each [status, text]).
    AGENT_PLAN = "agent_plan"
    #: An external agent asked for a permission, and how it was answered.
    PERMISSION = "permission"
    #: A connection a sandboxed run's program made through its egress proxy: host,
    #: port, address, allowed, reason, method, bytes_up, bytes_down, duration.
    NET_CONNECT = "net_connect"
    #: A line of a ``jarvis code`` run's setup (its toolchain made in the sandbox).
    CODE_SETUP = "code_setup"


@dataclass(slots=True)
class Event:
    type: EventType
    data: Mapping[str, Any] = field(default_factory=dict)
    timestamp: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, object]:
        return {"type": self.type.value, "data": dict(self.data), "timestamp": self.timestamp}


Subscriber = Callable[[Event], None]
_new = object.__new__
_now = time.time


def _same(one: Subscriber, other: Subscriber) -> bool:
    if one is other:
        return True
    owner = getattr(one, "__self__", None)
    return (
        owner is not None
        and owner is getattr(other, "__self__", None)
        and getattr(one, "__func__", None) is getattr(other, "__func__", None)
    )


class EventBus:
    """Publish/subscribe within one process. A subscriber that raises is logged and
    skipped: telemetry must never change the outcome of a run."""

    def __init__(self) -> None:
        # Replaced, never mutated: publish iterates it without a lock or a copy.
        self._subscribers: tuple[tuple[EventType | None, Subscriber], ...] = ()
        self._lock = threading.Lock()

    def subscribe(self, callback: Subscriber, event_type: EventType | None = None) -> None:
        """Call ``callback`` for every event of ``event_type`` (None: every event)."""
        with self._lock:
            self._subscribers = (*self._subscribers, (event_type, callback))

    def unsubscribe(self, callback: Subscriber) -> None:
        """Stop calling ``callback``. A bound method is a new object at each access
        (``bus.unsubscribe(obj.method)`` is never the one subscribed), so it is matched
        by its object and function; anything else by identity."""
        with self._lock:
            self._subscribers = tuple(
                (t, c) for t, c in self._subscribers if not _same(c, callback)
            )

    def publish(self, event_type: EventType, /, **data: object) -> Event:
        # Event(event_type, data, time.time()) without the dataclass's Python __init__:
        # publish runs several times a turn.
        event = _new(Event)
        event.type, event.data, event.timestamp = event_type, data, _now()
        # deliver()'s loop, here: publish runs several times a turn.
        for wanted, callback in self._subscribers:
            if wanted is not None and wanted is not event_type:
                continue
            try:
                callback(event)
            except Exception:
                log.exception("event subscriber %r failed on %s", callback, event_type.value)
        return event

    def deliver(self, event: Event) -> None:
        """Hand an event built elsewhere (another process's, read from a wire) to the
        subscribers; its data is never spread into keyword arguments."""
        for wanted, callback in self._subscribers:
            if wanted is not None and wanted is not event.type:
                continue
            try:
                callback(event)
            except Exception:
                log.exception("event subscriber %r failed on %s", callback, event.type.value)
