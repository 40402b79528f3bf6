"""Held calls: the calls of a reply that the loop does not run, because they pass values
the run was never given or go to a tool foreign to the request (see ``_grounding``),
and the notes that tell the model, and the user, why."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TypedDict

from .._grounding import Sources, assess
from .._messages import ToolCall, ToolSpec
from ..tools import ToolDispatcher

__all__ = ["HeldCall", "find_held", "held_message", "held_note", "retry_note"]


class HeldCall(TypedDict, total=False):
    """A call not made, and why: values the run was never given (``invented``), a tool
    foreign to the request (``unrelated``), or one an earlier held call named
    (``withheld``). Kept in the run's metadata as it is (``held_calls``)."""

    tool: str
    invented: dict[str, object]
    unrelated: bool
    withheld: bool


def find_held(
    calls: Sequence[ToolCall],
    executor: ToolDispatcher,
    sources: Sources,
    withheld: Collection[str] = (),
) -> list[HeldCall]:
    """The calls of a reply not to run, each as ``{"tool": name, "invented": {argument:
    value}}`` (values the run was never given, see :func:`invented`), ``{"tool":
    name, "unrelated": True}`` (a name passed to a tool foreign to the request, see
    :func:`unrelated`) or ``{"tool": name, "withheld": True}`` (a tool an earlier held
    call named, no longer offered)."""
    held: list[HeldCall] = []
    spec_of = executor.spec_of
    for call in calls:
        spec = spec_of.get(call.name)
        if spec is None:
            continue  # an unknown tool gets the executor's own error
        if call.name in withheld:
            held.append({"tool": call.name, "withheld": True})
            continue
        values, foreign = assess(call, spec, sources)
        if values:
            held.append({"tool": call.name, "invented": values})
        elif foreign:
            held.append({"tool": call.name, "unrelated": True})
    return held


def _why_held(held: Sequence[HeldCall], max_chars: int = 80, *, values: bool = True) -> str:
    """Why ``held`` were not made; ``values=False`` names the arguments without their
    values (for the model: a made-up value read back is a value it then states)."""

    def shown(value: object) -> str:
        text = repr(value)
        return text if len(text) <= max_chars else text[: max_chars - 3] + "..."

    reasons = []
    for h in held:
        if "invented" in h:
            if values:
                given = ", ".join(f"{k}={shown(v)}" for k, v in h["invented"].items())
                reason = f"the request does not give the values of {h['tool']}({given})"
            else:
                names = ", ".join(h["invented"])
                reason = f"the request does not give the {names} that {h['tool']} needs"
        elif "withheld" in h:
            reason = f"{h['tool']} was held before and is not offered"
        else:
            reason = f"{h['tool']} does not do what the request asks"
        if reason not in reasons:
            reasons.append(reason)
    return "; ".join(reasons)


def held_note(held: Sequence[HeldCall]) -> str:
    """Why the answer turn is asked after held calls (see :func:`_held`); without the
    values held, which the model would otherwise state as its answer."""
    return (
        f"Your tool call was not made: {_why_held(held, values=False)}. Do not make up "
        "values. If you need a value, ask for it; otherwise answer from what you know.\n\n"
    )


def retry_note(held: Sequence[HeldCall], others: Sequence[ToolSpec]) -> str:
    """The turn asked again after held calls, with the tools not held still offered:
    why (without the values held), and what is left."""
    names = ", ".join(spec.name for spec in others[:20])
    return (
        f"Your tool call was not made: {_why_held(held, values=False)}. Do not make up "
        f"values. If one of the tools still offered ({names}) answers the request "
        "without them, call it; otherwise answer in plain text."
    )


def held_message(held: Sequence[HeldCall]) -> str:
    """The run's answer when the model gave none after held calls: why."""
    return (
        f"No answer: the model's tool call was not made ({_why_held(held)}). "
        "Say what is needed and ask again."
    )
