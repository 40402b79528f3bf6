"""Conversations that take turns on one embedded model keep their prompt's cache.

llama.cpp holds one key/value cache, and llama-cpp-python reuses it only for the prompt
prefix it shares with the previous call. An agent's turns share a long prefix (system
prompt, tools, history), so one agent alone reuses it; but when calls of two
conversations alternate, each call evicts the other's prefix and the next turn reads its
whole prompt again: an RLM's root turns between its ``llm_query`` sub-calls, opencode's
title request between its turns, two daemon tasks on one model. On two cores a 1.5B
model reads some 50 tokens a second, so an 8,000-token agent prompt read again costs
minutes.

So, before a call would cut a long live prefix, that prefix's cache (llama.cpp's state
of sequence 0: only the cells in use) is copied out, and a later call that shares more
with a copy than with the live cache has it copied back in; llama-cpp-python then reads
only the rest of the prompt. Copies are bounded in bytes, least recently used dropped.
"""

from __future__ import annotations

import ctypes
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["PrefixStates", "common_prefix"]

log = logging.getLogger(__name__)

#: A live prefix shorter than this is cheaper to read again than to copy out.
MIN_SAVED_TOKENS = 256
#: A copy is restored only when it saves at least this many tokens over the live cache.
MIN_GAIN_TOKENS = 64


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class _Saved:
    __slots__ = ("data", "tokens")

    def __init__(self, tokens: list[int], data: Any) -> None:
        self.tokens = tokens
        self.data = data  # a ctypes byte array: llama.cpp's state of sequence 0


class PrefixStates:
    """Saved caches of one ``llama_cpp.Llama``, wrapped around its ``generate`` (which
    every completion goes through with the prompt's tokens): ``PrefixStates(llama,
    budget).install()``. Used only under the engine's generation lock."""

    def __init__(self, llama: Any, budget_bytes: int) -> None:
        self.llama = llama
        self.budget = budget_bytes
        self.saved: OrderedDict[int, _Saved] = OrderedDict()  # by id, oldest first
        self.restored = 0  # copies put back (for tests and logs)
        self.reused_tokens = 0  # prompt tokens those copies spared reading again
        self._generate: Callable[..., Iterator[int]] | None = None

    def install(self) -> PrefixStates:
        self._generate = self.llama.generate
        self.llama.generate = self.generate
        return self

    def generate(self, tokens: Sequence[int], *args: Any, **kwargs: Any) -> Iterator[int]:
        assert self._generate is not None
        tokens = list(tokens)
        if self.budget > 0:
            self._before(tokens)
        return self._generate(tokens, *args, **kwargs)

    def _before(self, tokens: list[int]) -> None:
        llama = self.llama
        live = int(llama.n_tokens)
        shared = common_prefix(llama.input_ids[:live].tolist(), tokens) if live else 0
        if live - shared >= MIN_SAVED_TOKENS:
            self._save(llama.input_ids[:live].tolist())
        best: tuple[int, int] | None = None
        for key, saved in self.saved.items():
            n = common_prefix(saved.tokens, tokens)
            if best is None or n > best[0]:
                best = (n, key)
        if best is not None and best[0] >= shared + MIN_GAIN_TOKENS:
            self._restore(self.saved[best[1]], best[0])

    def _save(self, tokens: list[int]) -> None:
        import llama_cpp

        if any(s.tokens == tokens for s in self.saved.values()):
            return
        # A copy covering this one's tokens is the same cache: keep only the longer.
        for key, saved in list(self.saved.items()):
            if saved.tokens == tokens[: len(saved.tokens)]:
                del self.saved[key]
        ctx = self.llama._ctx.ctx
        size = int(llama_cpp.llama_state_seq_get_size(ctx, 0))
        if size <= 0 or size > self.budget:
            return
        data = (ctypes.c_uint8 * size)()
        if int(llama_cpp.llama_state_seq_get_data(ctx, data, size, 0)) != size:
            return
        self.saved[id(data)] = _Saved(tokens, data)
        while sum(len(s.data) for s in self.saved.values()) > self.budget:
            self.saved.popitem(last=False)

    def _restore(self, saved: _Saved, shared: int) -> None:
        import llama_cpp

        llama = self.llama
        llama._ctx.kv_cache_clear()
        size = len(saved.data)
        if int(llama_cpp.llama_state_seq_set_data(llama._ctx.ctx, saved.data, size, 0)) != size:
            # Nothing usable is left in the cache: the call reads its whole prompt.
            llama._ctx.kv_cache_clear()
            llama.n_tokens = 0
            return
        n = len(saved.tokens)
        llama.input_ids[:n] = saved.tokens
        llama.n_tokens = n
        llama._requires_eval = True  # the logits are not this state's: decode again
        for key, value in list(self.saved.items()):
            if value is saved:
                self.saved.move_to_end(key)
        self.restored += 1
        self.reused_tokens += shared
        log.debug("restored a saved cache of %d tokens (%d shared with the prompt)", n, shared)
