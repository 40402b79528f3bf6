"""Calculator: arithmetic by walking the AST, never ``eval``.

Bounds keep one call to microseconds whatever a model writes: expression length,
digits of a literal, the exponent of ``**`` and the size of every intermediate integer
(so ``9**9**9`` is refused before it is computed), nesting depth and wall time.
``^`` means power here, as models use it.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import re
import time
from collections.abc import Callable
from typing import Any, ClassVar, cast

from .._errors import ToolError
from .._messages import ToolSpec
from ._base import BaseTool

__all__ = ["CalculatorError", "CalculatorTool", "evaluate"]

MAX_CHARS = 500
MAX_LITERAL_DIGITS = 100
MAX_EXPONENT = 10_000
MAX_INT_BITS = 4096
MAX_DEPTH = 250
MAX_SECONDS = 0.05
_LITERAL_BITS = int(MAX_LITERAL_DIGITS * 3.33) + 1


class CalculatorError(ToolError):
    pass


_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "log": math.log,
    "ln": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "floor": math.floor,
    "ceil": math.ceil,
    "factorial": math.factorial,
}
_CONSTS = {"pi": math.pi, "e": math.e, "tau": math.tau}
# A tuple, not ``int | float``: that expression builds a new union on every call.
_NUMBER = (int, float)


def _check_int(value: Any) -> Any:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise CalculatorError(f"result too large (more than {MAX_INT_BITS} bits)")
    return value


class _Evaluator:
    """Walks the tree with a per-node-type dispatch; the clock is read every 64 nodes."""

    __slots__ = ("deadline", "nodes")

    def __init__(self) -> None:
        self.deadline = time.perf_counter() + MAX_SECONDS
        self.nodes = 0

    def eval(self, node: ast.AST, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise CalculatorError("expression nested too deeply")
        self.nodes += 1
        if not self.nodes & 63 and time.perf_counter() > self.deadline:
            raise CalculatorError("expression takes too long to evaluate")
        handler = _HANDLERS.get(type(node))
        if handler is None:
            if isinstance(node, ast.Attribute):
                raise CalculatorError("attribute access (a.b) is not allowed: use plain arithmetic")
            if isinstance(node, ast.Subscript):
                raise CalculatorError("indexing (a[b]) is not allowed: use plain arithmetic")
            raise CalculatorError(
                f"{type(node).__name__} is not allowed in an arithmetic expression"
            )
        return handler(self, node, depth)

    def constant(self, node: ast.Constant, depth: int) -> Any:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, _NUMBER):
            raise CalculatorError(f"only numbers are allowed, not {type(value).__name__}")
        if isinstance(value, int) and value.bit_length() > _LITERAL_BITS:
            raise CalculatorError(
                f"number literal too large (more than {MAX_LITERAL_DIGITS} digits)"
            )
        return value

    def binop(self, node: ast.BinOp, depth: int) -> Any:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise CalculatorError(f"operator {type(node.op).__name__} is not allowed")
        left = self.eval(node.left, depth + 1)
        right = self.eval(node.right, depth + 1)
        if op is operator.pow:
            self._check_power(left, right)
        elif (
            op is operator.mul
            and type(left) is int
            and type(right) is int
            and left.bit_length() + right.bit_length() > MAX_INT_BITS + 1
        ):
            raise CalculatorError(f"result too large (more than {MAX_INT_BITS} bits)")
        try:
            return _check_int(op(left, right))
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("result too large for a float") from None

    def unaryop(self, node: ast.UnaryOp, depth: int) -> Any:
        unary = _UNARY.get(type(node.op))
        if unary is None:
            raise CalculatorError(f"operator {type(node.op).__name__} is not allowed")
        return unary(self.eval(node.operand, depth + 1))

    def name(self, node: ast.Name, depth: int) -> Any:
        if node.id in _CONSTS:
            return _CONSTS[node.id]
        raise CalculatorError(f"unknown name {node.id!r}")

    def call(self, node: ast.Call, depth: int) -> Any:
        if not isinstance(node.func, ast.Name):
            raise CalculatorError("only plain function calls like sqrt(2) are allowed")
        func = _FUNCS.get(node.func.id)
        if func is None:
            known = ", ".join(sorted(_FUNCS))
            raise CalculatorError(f"unknown function {node.func.id!r} (known: {known})")
        if node.keywords:
            raise CalculatorError("keyword arguments are not allowed")
        args = [self.eval(a, depth + 1) for a in node.args]
        if func is math.factorial and args and (not isinstance(args[0], int) or args[0] > 500):
            raise CalculatorError("factorial takes an integer up to 500")
        try:
            return _check_int(func(*args))
        except (ValueError, TypeError, OverflowError) as exc:
            raise CalculatorError(f"{node.func.id}: {exc}") from None

    @staticmethod
    def _check_power(base: Any, exponent: Any) -> None:
        if abs(exponent) > MAX_EXPONENT:
            raise CalculatorError(f"exponent {exponent} is too large (limit {MAX_EXPONENT})")
        if (
            isinstance(base, int)
            and isinstance(exponent, int)
            and exponent > 0
            and abs(base) > 1
            and exponent * math.log2(abs(base)) > MAX_INT_BITS
        ):
            shown = str(base) if base.bit_length() <= 64 else f"a {base.bit_length()}-bit number"
            raise CalculatorError(
                f"{shown}**{exponent} is too large (more than {MAX_INT_BITS} bits)"
            )


_LONG_DIGITS = re.compile(r"\d{" + str(MAX_LITERAL_DIGITS + 1) + ",}")


@functools.lru_cache(maxsize=256)
def _parse(text: str) -> ast.expr:
    # Cached: agents repeat expressions, and the tree is only read.
    try:
        # ast.parse without its Python-level wrapper (this runs on every tool call).
        tree = cast(ast.Expression, compile(text, "<expr>", "eval", ast.PyCF_ONLY_AST))
    except SyntaxError as exc:
        raise CalculatorError(f"not an arithmetic expression: {exc.msg}") from None
    except ValueError:  # null bytes
        raise CalculatorError("not an arithmetic expression: it contains a null byte") from None
    return tree.body


_HANDLERS: dict[type[ast.AST], Callable[[_Evaluator, Any, int], Any]] = {
    ast.Constant: _Evaluator.constant,
    ast.BinOp: _Evaluator.binop,
    ast.UnaryOp: _Evaluator.unaryop,
    ast.Name: _Evaluator.name,
    ast.Call: _Evaluator.call,
}


def format_number(value: Any) -> str:
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.12g}"
    return str(value)


def evaluate(expression: str) -> int | float:
    """Evaluate ``expression`` within the bounds or raise CalculatorError."""
    text = expression.strip().rstrip("=").strip()
    if not text:
        raise CalculatorError("empty expression")
    if len(text) > MAX_CHARS:
        raise CalculatorError(f"expression too long ({len(text)} characters, limit {MAX_CHARS})")
    # Long digit runs are refused before parsing: int() of a huge literal is itself slow.
    if _LONG_DIGITS.search(text):
        raise CalculatorError(f"number literal too large (more than {MAX_LITERAL_DIGITS} digits)")
    value = _Evaluator().eval(
        _parse(text.replace("^", "**").replace("\u00d7", "*").replace("\u00f7", "/"))
    )
    if not isinstance(value, _NUMBER):
        raise CalculatorError("the expression does not produce a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    return value


class CalculatorTool(BaseTool):
    tool_id: ClassVar[str] = "calculator"
    blocking: ClassVar[bool] = False  # bounded and pure: runs inline
    _spec = ToolSpec(
        name="calculator",
        description=(
            "Evaluate an arithmetic expression exactly, e.g. '2**10 + 3*(4-1)' or 'sqrt(2)'. "
            "Operators + - * / // % ** (^ also means power); functions sqrt, log, exp, sin, "
            "cos, tan, floor, ceil, abs, round, min, max, factorial; constants pi, e."
        ),
        parameters={
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "The expression."}},
            "required": ["expression"],
        },
    )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def execute(self, **params: Any) -> str:
        return format_number(evaluate(str(params["expression"])))
