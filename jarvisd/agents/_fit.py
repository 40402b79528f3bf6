"""Fitting a run's history into the engine's real context window, by an estimate of
tokens that needs no tokenizer."""

from __future__ import annotations

from collections.abc import Sequence

from .._messages import Message, Role

__all__ = ["estimate_tokens", "fit_messages"]


def estimate_tokens(message: Message) -> int:
    """A conservative estimate (about 3 characters a token, plus framing): no tokenizer
    is needed, and over-estimating only drops a turn early."""
    size = len(message.content)
    for call in message.tool_calls:
        size += len(call.name) + len(call.arguments) + 16
    return size // 3 + 8


def _trim_middle(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    keep = max(max_chars - 80, 40)
    head, tail = text[: keep // 2], text[-(keep // 2) :]
    return f"{head}\n[... {len(text) - 2 * (keep // 2)} characters cut to fit the context window ...]\n{tail}"


def _shrink(message: Message, tokens: int) -> Message:
    return Message(
        message.role,
        _trim_middle(message.content, max(tokens * 3, 120)),
        message.tool_calls,
        message.tool_call_id,
        message.name,
    )


def fit_messages(messages: Sequence[Message], budget: int) -> list[Message]:
    """The history to send when only ``budget`` tokens of prompt fit.

    Kept: the leading system messages and the task (first user message), then whole
    turns from the newest back; an assistant message is never separated from the
    results of its tool calls. What is dropped is said in one short note. Oversized
    single messages are cut in the middle rather than dropped.
    """
    sizes = [estimate_tokens(m) for m in messages]
    if sum(sizes) <= budget:
        return list(messages)
    head_end = 0
    while head_end < len(messages) and messages[head_end].role is Role.SYSTEM:
        head_end += 1
    if head_end < len(messages) and messages[head_end].role is Role.USER:
        head_end += 1
    head = list(messages[:head_end])
    head_size = sum(sizes[:head_end])
    if head_size > budget // 2:  # the task itself is huge: cut its middle
        share = max(budget // 2 // max(len(head), 1), 32)
        head = [_shrink(m, share) if estimate_tokens(m) > share else m for m in head]
        head_size = sum(estimate_tokens(m) for m in head)
    # Turn groups: an assistant message and everything up to the next assistant message.
    groups: list[tuple[int, int]] = []
    start = head_end
    for i in range(head_end + 1, len(messages) + 1):
        if i == len(messages) or messages[i].role is Role.ASSISTANT:
            groups.append((start, i))
            start = i
    kept: list[Message] = []
    left = budget - head_size - 30
    for g_start, g_end in reversed(groups):
        size = sum(sizes[g_start:g_end])
        if size <= left:
            kept = list(messages[g_start:g_end]) + kept
            left -= size
            continue
        if not kept:  # even the newest turn is too big: keep it, cut down
            share = max(left // max(g_end - g_start, 1), 32)
            kept = [_shrink(m, share) for m in messages[g_start:g_end]]
        break
    dropped = len(messages) - head_end - len(kept)
    note = (
        [Message.user(f"[{dropped} earlier messages were left out to fit the context window.]")]
        if dropped
        else []
    )
    return head + note + kept
