"""Parsing Python that an agent or a project wrote, where failing to parse is an answer."""

from __future__ import annotations

import ast
import gc

#: What CPython raises for source it cannot parse. A deep expression (100,000 unary
#: minuses) is a MemoryError from the parser, deep nesting a RecursionError.
UNPARSABLE = (SyntaxError, ValueError, RecursionError, MemoryError)


def parse_module(source: str) -> ast.Module | None:
    """``source`` parsed, or None when it is not Python this interpreter can parse."""
    try:
        try:
            return ast.parse(source)
        except SystemError:
            # CPython 3.11 counts recursion while it builds the tree; a collection in
            # the middle that runs a finalizer (an asyncio task logging its exception)
            # moves that count, and the parse fails with "AST constructor recursion
            # depth mismatch" (cpython#106905). The source is fine: parse it again
            # with no collection able to run in between.
            enabled = gc.isenabled()
            gc.disable()
            try:
                return ast.parse(source)
            finally:
                if enabled:
                    gc.enable()
    except UNPARSABLE:
        return None
