"""The most tokens a request's prompt can take, known before it is sent: what the run's
ledger reserves for it (``RunEngine``).

With a tokenizer at hand (:meth:`Engine.count_tokens`) the text is counted; without
one, its UTF-8 bytes bound it. Either way the count covers only the text jarvis sends;
the engine's chat template adds its own tokens around it, bounded by the overheads below.

Why the byte count is an upper bound: the models jarvis runs use byte-level BPE (GPT,
Llama 3, Qwen) or SentencePiece with byte fallback (Llama 2, Mistral, Gemma). In the
first, every token stands for at least one byte of the text; in the second, every
token stands for at least one character, and a character with no piece of its own
becomes one token per byte. So a text of N UTF-8 bytes is at most N tokens (plus one
for SentencePiece's leading space marker, inside the per-message overhead). Tokenizers
that normalise text with NFKC can expand a few rare characters; none of these models
does.

Why the overheads are enough: a chat template wraps each message in role markers and
special tokens (ChatML: ``<|im_start|>user\\n ... <|im_end|>\\n``, 5 tokens; Llama 3: 5),
and each place where a message's text meets the template may tokenize a token or two
differently from the text alone: 16 per message covers both. A tool call is rendered as
JSON in tags (about 20 tokens besides its name and arguments): 24. A request adds the
beginning-of-text token, the generation prompt and the default system line some
templates insert (Qwen's is 17 tokens): 64. Offering tools adds the template's tool
preamble (Qwen 2.5's is under 200 tokens), and each spec is rendered as its JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .._messages import Message, ToolSpec
from ._base import Engine

__all__ = ["prompt_tokens", "text_tokens"]

MESSAGE_OVERHEAD = 16
CALL_OVERHEAD = 24
REQUEST_OVERHEAD = 64
TOOLS_OVERHEAD = 256
TOOL_OVERHEAD = 16


def _bytes(text: str) -> int:
    # An ASCII str knows it is ASCII: its length is its UTF-8 size, without encoding.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def text_tokens(engine: Engine, text: str, model: str = "") -> int:
    """The tokens ``text`` takes: counted by ``engine`` when it can, else its UTF-8
    bytes (an upper bound, see the module docstring)."""
    if not text:
        return 0
    counted = engine.count_tokens(text, model)
    return _bytes(text) if counted is None else counted


def prompt_tokens(
    engine: Engine, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), model: str = ""
) -> int:
    """The most tokens ``messages`` and ``tools`` can take as one prompt for ``model``."""
    pieces: list[str] = []
    overhead = REQUEST_OVERHEAD + MESSAGE_OVERHEAD * len(messages)
    for message in messages:
        pieces.append(message.content)
        if message.name:
            pieces.append(message.name)
        if message.tool_call_id:
            pieces.append(message.tool_call_id)
        for call in message.tool_calls:
            pieces.extend((call.id, call.name, call.arguments))
            overhead += CALL_OVERHEAD
    if tools:
        overhead += TOOLS_OVERHEAD + TOOL_OVERHEAD * len(tools)
        pieces.extend(json.dumps(spec.to_openai(), ensure_ascii=False) for spec in tools)
    # One text, so a tokenizer is asked once; the pieces' boundaries are in the overhead.
    return text_tokens(engine, "\n".join(pieces), model) + overhead
