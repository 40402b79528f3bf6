"""The event bus: what a subscriber is told, and that it stops being told."""

from __future__ import annotations

from jarvisd._events import Event, EventBus, EventType


class _Watcher:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_event(self, event: Event) -> None:
        self.seen.append(str(event.data.get("call_id")))


def test_a_bound_method_unsubscribed_is_no_longer_called() -> None:
    # ``watcher.on_event`` is a new object at each access: matched by identity, the
    # unsubscribe removed nothing and the method was called for the rest of the run.
    bus = EventBus()
    watcher, other = _Watcher(), _Watcher()
    bus.subscribe(watcher.on_event, EventType.TOOL_CALL_START)
    bus.subscribe(other.on_event, EventType.TOOL_CALL_START)
    bus.publish(EventType.TOOL_CALL_START, call_id="1")
    bus.unsubscribe(watcher.on_event)
    bus.publish(EventType.TOOL_CALL_START, call_id="2")
    assert watcher.seen == ["1"]
    assert other.seen == ["1", "2"]  # another object's same method stays


def test_a_function_unsubscribed_is_no_longer_called() -> None:
    bus = EventBus()
    seen: list[EventType] = []
    bus.subscribe(lambda event: seen.append(event.type))

    def kept(event: Event) -> None:
        seen.append(event.type)

    bus.subscribe(kept)
    bus.unsubscribe(kept)
    bus.publish(EventType.TOOL_CALL_END)
    assert seen == [EventType.TOOL_CALL_END]
