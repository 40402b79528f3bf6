"""Streaming a tool-using agent's final answer as the model writes it.

A turn of the tool loop is not known to be the answer until its dialect has read it:
the same text may still turn out to be a tool call. :class:`AnswerGate` sits between
the engine's stream and ``run.on_delta`` and passes on only text that is the final
answer whatever the model writes next.

The rule, which guarantees that what was streamed is exactly the run's answer:

- Text of a turn goes out only once the dialect is *committed* to reading the reply as
  a final answer: :meth:`Dialect.answer_so_far` returns the part of the answer that no
  continuation can change, or None while the reply may still become a call. The gate
  sends the growth of that prefix; it never sends anything else.
- A dialect commits only where its own parser is decided. ReAct is: the first of
  ``Action:`` and ``Final Answer:`` wins, so after ``Final Answer:`` the answer streams,
  held back only where a later line may still become a marker that would end it, and
  at trailing whitespace. ``Thought:``/``Action:`` text never goes out. CodeAct is too,
  for a ``Final Answer:`` written before any code fence (code after it is part of the
  answer); a code block before it makes the reply a call.
- The other dialects never commit before the reply ends, because their parsers read a
  call anywhere in the reply: function calling recovers ``I will compute. {"name": ...}``
  (prose, then a call) and takes calls the engine reports at the end of its stream;
  RLM runs a code block wherever it stands, even after ``Final Answer:``; structured
  mode takes the first JSON object that reads as an answer or a call; CodeAct reads a
  reply without ``Final Answer:`` only once it has ended. Any prose streamed early could
  therefore turn out to belong to a call turn. Their answer goes out in one piece once
  the reply is known to be final, and their turns are generated with one plain call,
  as in a run that does not stream (nothing of a turn could go out early anyway).
- ``<think>`` blocks are left out before the dialect sees the text (:class:`ThinkFilter`),
  as every parser strips them first.
- :meth:`AnswerGate.close` is called once, with the run's answer, when a run ends with
  one: it sends whatever of the answer has not gone out (the whole answer when no turn
  committed, as with rlm's ``FINAL()`` from a tool result or the loop's answer turn).
  A run that ends with an error never calls it, and never committed a turn (a committed
  turn is a final answer), so nothing of it was streamed.

So the text passed to ``on_delta`` during a run, joined, is the run's
``AgentResult.content``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

from .._messages import Generation, StreamChunk
from ._base import ThinkFilter, collect

__all__ = ["AnswerGate"]

logger = logging.getLogger(__name__)


class AnswerGate:
    """Passes a run's final answer to ``emit``: the committed part of a turn as it is
    generated (``answer_so_far`` of the text so far, think blocks left out), the rest
    at :meth:`close`. With ``answer_so_far=None`` nothing goes out before :meth:`close`
    and :attr:`streams` is false: turns need not be streamed at all."""

    __slots__ = ("_parts", "answer_so_far", "emit", "sent")

    def __init__(
        self, emit: Callable[[str], None], answer_so_far: Callable[[str], str | None] | None
    ) -> None:
        self.emit = emit
        self.answer_so_far = answer_so_far
        self.sent = ""  # what went out; always a prefix of the answer
        self._parts: list[str] = []  # this turn's text so far, think blocks left out

    @property
    def streams(self) -> bool:
        """Whether text of a turn can go out while it is generated."""
        return self.answer_so_far is not None

    async def turn(self, chunks: AsyncIterator[StreamChunk]) -> Generation:
        """Generate one turn from ``chunks``, streaming what is committed answer."""
        self._parts = []
        shown = ThinkFilter(self._read)
        generation = await collect(chunks, shown.feed)
        shown.flush()
        return generation

    def _read(self, text: str) -> None:
        self._parts.append(text)
        if self.answer_so_far is None:
            return
        answer = self.answer_so_far("".join(self._parts))
        if answer and len(answer) > len(self.sent) and answer.startswith(self.sent):
            self.emit(answer[len(self.sent) :])
            self.sent = answer

    def close(self, answer: str) -> None:
        """The run ended with ``answer``: send what of it has not gone out."""
        if not answer.startswith(self.sent):
            # Cannot happen while the dialect's answer_so_far agrees with its parser.
            logger.warning("the streamed answer differs from the run's answer")
            return
        rest = answer[len(self.sent) :]
        self.sent = answer
        if rest:
            self.emit(rest)
