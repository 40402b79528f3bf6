"""Calculator: arithmetic by walking the AST, never ``eval``.

Bounds keep one call to microseconds whatever a model writes: expression length,
digits of a literal, the exponent of ``**`` and the size of every intermediate integer
(so ``9**9**9`` is refused before it is computed), nesting depth and wall time.

The text is first rewritten from what models write into Python syntax (:func:`normalize`),
a handful of unambiguous, bounded regex passes:

- ``^`` is a power; U+00D7 and U+00F7 (times and division signs) are ``*`` and ``/``;
  U+2212 (the minus sign) is ``-``.
- ``x`` (or ``X``) between two numbers or brackets is ``*``: ``3 x 4``, ``3x4``,
  ``(1+2)x3``. The ``x`` of a name (``exp``, ``max``, ``x1``) never is, nor is the ``x``
  of a hexadecimal literal (``0x1f``).
- A percent sign after a number or ``)`` that no operand follows is a percentage:
  ``17.5% of 86420`` is ``(17.5/100) * 86420``, ``15% * 200`` is ``0.15 * 200``, a bare
  ``12%`` is 0.12 (so ``100 - 15%`` is 99.85: a percentage is only ever a fraction).
  ``10 % 3`` (an operand follows) stays the remainder.
- Thousands separators: a comma is one only inside a number written in groups, that is
  a first group of 1-3 digits not starting with 0, then groups of exactly three digits,
  with no digit after the last group (``86,420``, ``1,234,567.5``). Any other comma keeps
  its meaning, so ``max(1, 2)`` and ``(1, 2)`` are unchanged. ``f(1,000)`` is ambiguous
  and reads as one number, 1000, as models write amounts; two arguments are written with
  a space, ``max(1, 0)`` (a space after a comma always separates).

Every refusal says how to rewrite the expression, for a model to correct its next call.
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


#: What an expression's parts evaluate to (a negative number's fractional power is complex:
#: refused at the end, as any result that is not a real number).
Value = int | float | complex

_BINOPS: dict[type[ast.operator], Callable[[Value, Value], Value]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Value], Value]] = {
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


_FUNC_LIST = ", ".join(sorted(_FUNCS))
#: Appended to refusals of what is not arithmetic: what the model may write instead.
HINT = (
    f"use only numbers, + - * / // % ** ( ) and the functions {_FUNC_LIST}"
    " (constants pi, e), e.g. write 17.5% of 86420 as 0.175 * 86420 and 2 to the power 10"
    " as 2**10"
)
#: Names models use for operations the calculator writes differently.
_RENAMED = {
    "pow": "use ** for powers: write pow(2, 10) as 2**10",
    "power": "use ** for powers: write 2 to the power 10 as 2**10",
    "squared": "use ** for powers: write 3 squared as 3**2",
    "cubed": "use ** for powers: write 3 cubed as 3**3",
    "of": "a percentage is a fraction: write 17.5% of 86420 as 0.175 * 86420",
    "percent": "a percentage is a fraction: write 17.5 percent of 86420 as 0.175 * 86420",
    "mod": "use % for the remainder: write 10 mod 3 as 10 % 3",
}


def _check_int(value: Value) -> Value:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise CalculatorError(f"result too large (more than {MAX_INT_BITS} bits)")
    return value


class _Evaluator:
    """Walks the tree with a per-node-type dispatch; the clock is read every 64 nodes."""

    __slots__ = ("deadline", "nodes")

    def __init__(self) -> None:
        self.deadline = time.perf_counter() + MAX_SECONDS
        self.nodes = 0

    def eval(self, node: ast.AST, depth: int = 0) -> Value:
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
            if isinstance(node, ast.Tuple):
                raise CalculatorError(
                    "a list of numbers (a, b) is not allowed: write one expression; a comma"
                    " is a thousands separator only before exactly three digits (86,420)"
                )
            raise CalculatorError(
                f"{type(node).__name__} is not allowed in an arithmetic expression: {HINT}"
            )
        return handler(self, node, depth)

    def constant(self, node: ast.Constant, depth: int) -> Value:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, _NUMBER):
            raise CalculatorError(f"only numbers are allowed, not {type(value).__name__}")
        if isinstance(value, int) and value.bit_length() > _LITERAL_BITS:
            raise CalculatorError(
                f"number literal too large (more than {MAX_LITERAL_DIGITS} digits)"
            )
        return value

    def binop(self, node: ast.BinOp, depth: int) -> Value:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise CalculatorError(f"operator {type(node.op).__name__} is not allowed")
        # A literal operand (most are) is read here, without eval's dispatch: a leaf
        # adds nothing to the depth or the work that eval bounds.
        a, b = node.left, node.right
        left = a.value if type(a) is ast.Constant else None
        if not (type(left) is float or (type(left) is int and left.bit_length() <= _LITERAL_BITS)):
            left = self.eval(a, depth + 1)  # not a number constant() takes as it is
        right = b.value if type(b) is ast.Constant else None
        if not (
            type(right) is float or (type(right) is int and right.bit_length() <= _LITERAL_BITS)
        ):
            right = self.eval(b, depth + 1)
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
            value = op(left, right)
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("result too large for a float") from None
        if type(value) is int and value.bit_length() > MAX_INT_BITS:  # _check_int, inline
            raise CalculatorError(f"result too large (more than {MAX_INT_BITS} bits)")
        return value

    def unaryop(self, node: ast.UnaryOp, depth: int) -> Value:
        unary = _UNARY.get(type(node.op))
        if unary is None:
            raise CalculatorError(f"operator {type(node.op).__name__} is not allowed")
        return unary(self.eval(node.operand, depth + 1))

    def name(self, node: ast.Name, depth: int) -> Value:
        if node.id in _CONSTS:
            return _CONSTS[node.id]
        hint = _RENAMED.get(node.id.lower(), f"variables are not allowed: {HINT}")
        raise CalculatorError(f"unknown name {node.id!r}: {hint}")

    def call(self, node: ast.Call, depth: int) -> Value:
        if not isinstance(node.func, ast.Name):
            raise CalculatorError("only plain function calls like sqrt(2) are allowed")
        func = _FUNCS.get(node.func.id)
        if func is None:
            hint = _RENAMED.get(node.func.id.lower(), f"the known functions are {_FUNC_LIST}")
            raise CalculatorError(f"unknown function {node.func.id!r}: {hint}")
        if node.keywords:
            raise CalculatorError("keyword arguments are not allowed")
        args = [self.eval(a, depth + 1) for a in node.args]
        if func is math.factorial and args and (not isinstance(args[0], int) or args[0] > 500):
            raise CalculatorError("factorial takes an integer up to 500")
        if func in (min, max) and len(args) < 2:
            raise CalculatorError(
                f"{node.func.id} takes two or more numbers separated by ', ', "
                f"e.g. {node.func.id}(1, 0); 1,000 is read as one thousand"
            )
        try:
            return _check_int(func(*args))
        except (ValueError, TypeError, OverflowError) as exc:
            raise CalculatorError(f"{node.func.id}: {exc}") from None

    @staticmethod
    def _check_power(base: Value, exponent: Value) -> None:
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
# What models write, rewritten into Python syntax (see the module docstring).
_SYMBOLS = str.maketrans({"\u00d7": "*", "\u00f7": "/", "\u2212": "-"})
_NUMERAL = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
# A number (not the digits of a name such as log2; an x before it may be a product
# just rewritten, as in 2x3x4) or a closing bracket, then x, then a number or bracket.
_TIMES = re.compile(r"((?<![A-WYZa-wyz_\d.])" + _NUMERAL + r"|\))(\s*)[xX](\s*)(?=[\d.(])")
_THOUSANDS = re.compile(r"(?<![\w.])[1-9]\d{0,2}(?:,\d{3})+(?!\d)")
# A percent sign that no operand follows (an operand starts with a digit, a point, a
# bracket, a sign glued to one of those, or a name), or that ``of`` follows.
_PERCENT = re.compile(
    r"((?<![\w.])" + _NUMERAL + r"|\))\s*%(?:\s*(of)\b|(?!\s*(?:[-+]?[\d.(]|[A-Za-z_])))"
)


_WORD = re.compile(r"[A-Za-z_]\w*")


def _syntax_hint(text: str) -> str:
    """How to rewrite ``text``, which does not parse: the hint for a word models use
    instead of an operator, if it holds one, else the general one."""
    if "%" in text:
        return _RENAMED["of"]
    for word in _WORD.findall(text):
        if word.lower() in _RENAMED:
            return _RENAMED[word.lower()]
    return HINT


def _times(match: re.Match[str]) -> str:
    left, before, after = match.groups()
    if left == "0" and not before and not after:
        return match.group(0)  # 0x1f is a hexadecimal literal, not 0 times 1f
    return f"{left} * "


def _percent(match: re.Match[str]) -> str:
    left, of = match.groups()
    fraction = f"{left}/100" if left == ")" else f"({left}/100)"
    return f"{fraction} *" if of else fraction


def normalize(text: str) -> str:
    """``text`` as Python syntax: the forms models write rewritten (module docstring)."""
    if text.isascii() and not any(c in text for c in "^,xX%"):
        return text  # the common case: nothing to rewrite
    text = text.translate(_SYMBOLS).replace("^", "**")
    text = _TIMES.sub(_times, text)
    text = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), text)
    return _PERCENT.sub(_percent, text)


@functools.lru_cache(maxsize=256)
def _parse(text: str) -> ast.expr:
    # Cached: agents repeat expressions, and the tree is only read.
    source = normalize(text)
    # Long digit runs are refused before parsing: int() of a huge literal is itself slow.
    # Checked after normalizing, as dropping thousands separators joins digits.
    if _LONG_DIGITS.search(source):
        raise CalculatorError(f"number literal too large (more than {MAX_LITERAL_DIGITS} digits)")
    try:
        # ast.parse without its Python-level wrapper (this runs on every tool call).
        tree = cast(ast.Expression, compile(source, "<expr>", "eval", ast.PyCF_ONLY_AST))
    except SyntaxError as exc:
        raise CalculatorError(
            f"not an arithmetic expression ({exc.msg}): {_syntax_hint(text)}"
        ) from None
    except ValueError:  # null bytes
        raise CalculatorError("not an arithmetic expression: it contains a null byte") from None
    return tree.body


_new = object.__new__

_HANDLERS: dict[type[ast.AST], Callable[[_Evaluator, Any, int], Value]] = {
    ast.Constant: _Evaluator.constant,
    ast.BinOp: _Evaluator.binop,
    ast.UnaryOp: _Evaluator.unaryop,
    ast.Name: _Evaluator.name,
    ast.Call: _Evaluator.call,
}


def format_number(value: object) -> str:
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
    # _Evaluator().eval(tree) without __init__'s frame, and a sum or product at the top
    # (the usual expression) handed to binop without eval's dispatch: this runs on every
    # calculator call. The walk's bounds are the same: binop's operands go through eval.
    tree = _parse(text)
    walker = _new(_Evaluator)
    walker.deadline = time.perf_counter() + MAX_SECONDS
    if type(tree) is ast.BinOp:
        walker.nodes = 1  # the root, counted as eval would
        value = walker.binop(tree, 0)
    else:
        walker.nodes = 0
        value = walker.eval(tree)
    if type(value) is int:  # the usual result: a number, and finite (ints are)
        return value
    if not isinstance(value, _NUMBER):
        raise CalculatorError(
            "the expression does not produce a number: write one expression, and numbers"
            " without commas or with thousands separators (86,420)"
        )
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
            "Operators + - * / // % ** (^ also means power, x and \u00d7 multiply, 17.5% of 200 "
            "is a percentage); functions sqrt, log, exp, sin, cos, tan, floor, ceil, abs, "
            "round, min, max, factorial; constants pi, e."
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
        value = evaluate(str(params["expression"]))
        return str(value) if type(value) is int else format_number(value)
