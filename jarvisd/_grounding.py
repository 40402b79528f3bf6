"""Which values of a tool call the conversation never gave: the calls small models make
up when no tool fits ("Who won the last world cup?" -> ``get_match_stats(team_name=
"Germany")``) or when the user left a value out (a date for "tonight", a year).

:class:`Sources` indexes what the run was given (the user's messages, the agent's
instructions, tool results): its words and its numbers. :func:`invented` reads one call
against it and returns the required arguments whose values appear nowhere there;
:func:`unrelated` finds the calls that pass such values, all given, to a tool that
shares no word with the request ("How many sides does a hexagon have?" ->
``calculate_boiling_point(substance="hexagon")``).

It judges only values a user would give: numbers, dates, names of at most
:data:`MAX_NAME_WORDS` words, and arithmetic (which may bring its own constants, 7 days
or 100 for a percentage, but must work on a number the user gave). Never counted: what
the model writes or places itself (a parameter named ``task``, ``query``, ``prompt``,
``code``, ``path``...; code, paths and URLs in any parameter), what it may rightly
choose (a flag, 0 or 1, the schema's default or one of its listed choices, a code such
as USD or NY). A name counts as given when any of its words was (``"New York, NY"`` for
"New York", ``"Lionel Messi"`` for "Messi"), and numbers in the forms people write them
(``5%`` is 0.05, "3 million", "next week" brings 7, "June01 2023" is 2023-06-01).
Pure functions, linear in the text read: the loop holds such calls (see
``agents._toolloop``), so the rules lean towards "given" wherever a real call might
differ from its request.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ._messages import ToolCall, ToolSpec

__all__ = ["Sources", "assess", "invented", "unrelated"]

#: A longer string is composed text (a task, a question), not a name the user gave.
MAX_NAME_WORDS = 6
#: Nesting read in an argument's value; deeper is composed data, not a user's value.
MAX_DEPTH = 8
#: Text indexed per source, first and last half: bounds the work on a huge tool result.
MAX_SOURCE_CHARS = 200_000

#: Words, with letters and digits apart ("June01" is June 1, "March.11" March 11).
_WORD = re.compile(r"[^\W\d_]+|\d+")
#: _WORD for lower-case ASCII text.
_ASCII_WORD = re.compile(r"[a-z]+|[0-9]+")
_NUMBER = re.compile(r"(?<!\w)[-+]?(?:\d+(?:[.,]\d+)*|\.\d+)(?:[eE][-+]?\d+)?")
#: Characters of code, formulas, paths and URLs: such a string is composed, not given.
_COMPOSED = re.compile(r"[=(){}\[\]<>;|&$*+^%#@~\\/\n]|\w\.\w")
_DATE = re.compile(r"\d{4}-\d{1,2}(?:-\d{1,2})?(?:[T ][\d:.]+Z?)?|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}")
_CODE = re.compile(r"[A-Z]{2,5}")
_OPERATOR = re.compile(r"[-+*/^%\u00d7\u00f7]")
_GROUPED = re.compile(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?")
_LIST_COMMA = re.compile(r"(?<=\d),(?=\d)")
_SCALE_AFTER = re.compile(r"\s*(k|thousand|m|million|bn|billion)\b")
_SCALE_INITIALS = frozenset("ktmb")
_DIGITS = re.compile(r"\d+")
_DIGIT = re.compile(r"\d")
_DECIMAL = re.compile(r"\d+(?:\.\d+)?")
#: Plain arithmetic (what :func:`_arithmetic` accepts without a word): numbers joined
#: by operators, spaces and brackets around them.
_SUM = re.compile(r"[\s(]*\d[\d.]*[\s)]*(?:[-+*/^%]+[\s(]*\d[\d.]*[\s)]*)+")
_LETTERS = re.compile(r"[^\W\d_]+")
_ASCII_LETTER = re.compile(r"[a-zA-Z]")
#: What the numeral pass of :meth:`Sources.add` adds to its word pass: a decimal part, a
#: thousands group, an exponent. A text without any ("1+1, 2+1", a plain "42") has only
#: plain runs of digits, which the word pass indexes already, with their scale words.
_NOT_PLAIN = re.compile(r"[.,]\d|\d[eE]")
#: Texts up to this long are remembered once indexed: a tool result or a reply seen
#: again ("2", "done") adds nothing, and indexing is the loop's costliest step.
_MEMO_CHARS = 4096
#: The words an arithmetic expression may hold besides numbers and operators.
_MATH_WORDS = frozenset(
    (
        "of",
        "x",
        "sqrt",
        "log",
        "ln",
        "exp",
        "sin",
        "cos",
        "tan",
        "pi",
        "e",
        "abs",
        "round",
        "min",
        "max",
        "floor",
        "ceil",
        "factorial",
        "mod",
    )
)
#: Parameters named for what the model writes or places itself: text (a sub-agent's
#: task, a search query, a prompt, code) and where its work goes (a path, a file, a URL).
_MODEL_WRITTEN = frozenset(
    (
        "task",
        "query",
        "prompt",
        "text",
        "content",
        "reason",
        "thought",
        "message",
        "question",
        "instruction",
        "instructions",
        "code",
        "command",
        "script",
        "body",
        "comment",
        "note",
        "summary",
        "description",
        "input",
        "goal",
        "request",
        "path",
        "file",
        "filename",
        "dir",
        "directory",
        "folder",
        "url",
        "uri",
    )
)
_NAME_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_STOP = frozenset(
    (
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "the",
        "to",
        "with",
        "vs",
    )
)
_WORD_NUMBERS = {
    w: float(i)
    for i, w in enumerate(
        ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
         "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
         "seventeen", "eighteen", "nineteen", "twenty")
    )
} | {
    "thirty": 30.0, "forty": 40.0, "fifty": 50.0, "sixty": 60.0, "seventy": 70.0,
    "eighty": 80.0, "ninety": 90.0, "hundred": 100.0, "thousand": 1e3, "million": 1e6,
    "billion": 1e9, "dozen": 12.0, "half": 0.5, "quarter": 0.25, "twice": 2.0,
    "double": 2.0, "triple": 3.0, "first": 1.0, "second": 2.0, "third": 3.0, "single": 1.0,
    "pair": 2.0, "once": 1.0,
}  # fmt: skip
_SCALES = {"k": 1e3, "thousand": 1e3, "m": 1e6, "million": 1e6, "bn": 1e9, "billion": 1e9}
#: Numbers a unit word brings with it ("next week" -> 7 days).
_UNITS = {
    "week": (7.0,), "weeks": (7.0,), "day": (24.0,), "days": (24.0,), "hour": (60.0, 3600.0),
    "hours": (60.0, 3600.0), "minute": (60.0,), "minutes": (60.0,), "year": (12.0, 52.0, 365.0),
    "years": (12.0, 52.0, 365.0), "month": (12.0, 30.0), "months": (12.0, 30.0),
    "percent": (100.0,), "decade": (10.0,), "century": (100.0,), "quarterly": (4.0,),
    "monthly": (12.0,), "weekly": (52.0,), "daily": (365.0,),
}  # fmt: skip
_MONTHS = {
    name: float(i + 1)
    for i, names in enumerate(
        (
            "january jan",
            "february feb",
            "march mar",
            "april apr",
            "may",
            "june jun",
            "july jul",
            "august aug",
            "september sep sept",
            "october oct",
            "november nov",
            "december dec",
        )
    )
    for name in names.split()
}


_RESCALES = (1.0, 1e-2, 1e2, 1e-3, 1e3, 1e-6)
#: The words that bring a number with them (written out, a unit, a month).
_NUMBER_WORDS = frozenset(_WORD_NUMBERS) | frozenset(_UNITS) | frozenset(_MONTHS)


def _key(number: float) -> float:
    return round(abs(number), 9)


@functools.lru_cache(maxsize=4096)
def _forms(value: float) -> tuple[float, ...]:
    """The keys a number is indexed under. A percentage is called as a fraction and a
    fraction as a percentage; a quantity with an SI prefix (50 mH, 100 µF, 2 km) in the
    base unit. Cached: the same small numbers come back in every run."""
    return tuple(_key(value * scale) for scale in _RESCALES)


@functools.lru_cache(maxsize=256)
def _indexed(text: str) -> tuple[frozenset[str], frozenset[float], frozenset[float]]:
    """What ``text`` adds to an index: its words, its numbers and their forms (see
    :class:`Sources`). Cached: a run's request, instructions and conversation come back
    in every run, and reading them was the costliest step of a short run."""
    scratch = Sources()
    scratch._read(text)
    return frozenset(scratch.words), frozenset(scratch._values), frozenset(scratch.numbers)


class Sources:
    """What the run was given, indexed: each word (lower case) and each number, with
    the forms a call may write it in (a percentage as a fraction, 3 million, a month
    as its number)."""

    def __init__(self, texts: Iterable[str] = ()) -> None:
        self.words: set[str] = set()
        self.numbers: set[float] = set()
        self._values: set[float] = set()  # numbers indexed, before their rescaled forms
        self._texts: set[str] = set()  # short texts indexed (see _MEMO_CHARS)
        for text in texts:
            self.add(text)

    def add(self, text: str) -> None:
        if len(text) <= _MEMO_CHARS:
            if text in self._texts:
                return  # indexing is idempotent: the same text adds nothing
            self._texts.add(text)
        if len(text) > MAX_SOURCE_CHARS:
            half = MAX_SOURCE_CHARS // 2
            text = text[:half] + "\n" + text[-half:]
        if text.isdigit() and text.isascii():  # a tool's result, often: one number
            self.words.add(text)
            value = float(text)
            if value not in self._values:  # _number(value), inline: once a turn
                self._number(value)
            return
        if len(text) <= _MEMO_CHARS:  # read once for all runs (see _indexed)
            words, values, numbers = _indexed(text)
            self.words |= words
            self._values |= values
            self.numbers |= numbers
            return
        self._read(text)

    def _read(self, text: str) -> None:
        """Index ``text``'s words and numbers: what :meth:`add` does with a text that is
        not a plain number. Only adds: what a text brings does not depend on the index
        it goes into (see :func:`_indexed`)."""
        lowered = text.lower()
        # ASCII text (most is) by a pattern without Unicode classes: the same words.
        words = (_ASCII_WORD if text.isascii() else _WORD).findall(lowered)
        # Each word's numbers once: a word already in the index brought them before.
        values, numbers = self._values, self.numbers
        for word in set(words).difference(self.words):
            if word.isdecimal():  # not isdigit: "²" is a digit that float() refuses
                value = float(word)
                # _number(value), inline: a task may name a dozen numbers.
                if value not in values:
                    values.add(value)
                    if math.isfinite(value):
                        numbers.update(_forms(value))
            elif word in _NUMBER_WORDS:  # most words name no number: one lookup for them
                if word in _WORD_NUMBERS:
                    self._number(_WORD_NUMBERS[word])
                self._number_set(_UNITS.get(word, ()))
                if word in _MONTHS:
                    self._number(_MONTHS[word])
        self.words.update(words)
        if not _SCALES.keys().isdisjoint(words):  # "3 million", "5k": rare
            for i, word in enumerate(words[1:]):
                if word in _SCALES and words[i].isdecimal():
                    self._number(float(words[i]) * _SCALES[word])
        if _NOT_PLAIN.search(text) is None:
            return
        for match in _NUMBER.finditer(text):
            end = match.end()
            # A scale word may follow ("3.5 million"); most numerals have none, and
            # their next character says so without reading on.
            following = text[end : end + 1]
            scaled = following.isspace() or following.lower()[:1] in _SCALE_INITIALS
            raw = match.group(0)
            if not scaled and raw.isdigit():
                continue  # a plain run of digits: indexed above, as a word
            self._numeral(raw, text[end : end + 12].lower() if scaled else "")

    def _numeral(self, raw: str, after: str) -> None:
        """A number as written: 1,234 and 1.5 as one number, "200,300,400" as three."""
        if raw.isdigit():  # the common case: one plain number
            forms = [raw]
        else:
            forms = [raw.replace(",", "")] if _GROUPED.fullmatch(raw) else []
            forms += _LIST_COMMA.split(raw) if "," in raw else [raw]
        scale = _SCALE_AFTER.match(after) if after else None
        for form in forms:
            try:
                value = float(form)
            except ValueError:
                continue
            self._number(value)
            if scale:
                self._number(value * _SCALES[scale.group(1)])

    def _number(self, value: float) -> None:
        if value in self._values:
            return  # a text names its numbers again and again (as a word, as a numeral)
        self._values.add(value)
        if math.isfinite(value):
            self.numbers.update(_forms(value))

    def _number_set(self, values: Iterable[float]) -> None:
        for value in values:
            self._number(value)

    def has_number(self, value: float) -> bool:
        return _key(value) in self.numbers

    def has_word(self, word: str) -> bool:
        """The word, or one of its forms: a shared stem of five letters ("evolution",
        "evolutionary"), a number written in words or digits, or a two-letter
        abbreviation ("km" for "kilometers", "ft" for "feet")."""
        if word in self.words:
            return True
        if word.isdigit() or word in _WORD_NUMBERS:
            return self.has_number(float(word) if word.isdigit() else _WORD_NUMBERS[word])
        if len(word) == 2:
            return any(w[0] == word[0] and word[1] in w[1:] for w in self.words)
        if len(word) < 3:
            return False
        # "gas" for "gasoline", "evolutionary" for "evolution".
        stem = word[:5]
        return any(w.startswith(stem) for w in self.words)


#: What a schema may say the model chooses a value from (see :func:`_neutral`).
_CHOICES = frozenset(("default", "const", "enum"))


def _neutral(value: object, schema: Mapping[str, Any]) -> bool:
    """Values the model may rightly choose itself: a flag, nothing, the schema's
    default, constant or one of its listed choices."""
    if value is None or isinstance(value, bool):
        return True
    if "default" in schema and value == schema["default"]:
        return True
    if "const" in schema and value == schema["const"]:
        return True
    choices = schema.get("enum")
    return isinstance(choices, list) and any(value == choice for choice in choices)


def _schema(value: object) -> Mapping[str, Any]:
    """A schema as found in a tool's parameters: a mapping, else none (a hostile or
    sloppy tool may put anything there)."""
    if type(value) is dict:  # the usual case, without the slower abstract-class check
        return value
    return value if isinstance(value, Mapping) else {}


def _leaves(value: object, schema: Mapping[str, Any], depth: int = 0) -> Iterator[float | str]:
    """The values in an argument that a user would give (numbers and strings, stripped):
    what the model may rightly choose (see :func:`_neutral`) and 0 and 1 left out."""
    if depth > MAX_DEPTH or _neutral(value, schema):
        return
    if isinstance(value, list):
        items = _schema(schema.get("items"))
        for item in value:
            yield from _leaves(item, items, depth + 1)
    elif isinstance(value, dict):
        props = _schema(schema.get("properties"))
        for key, item in value.items():
            yield from _leaves(item, _schema(props.get(key)), depth + 1)
    elif isinstance(value, int | float):
        # 0 and 1 are the values "from rest", "a", "next" stand for: never counted.
        if value not in (0, 1) and math.isfinite(value):
            yield float(value)
    elif isinstance(value, str) and value.strip():
        yield value.strip()


def _given(value: float | str, sources: Sources) -> bool:
    return _judge_leaf(value, sources)[0]


def _judge_leaf(value: float | str, sources: Sources) -> tuple[bool, bool]:
    """Whether ``value`` was given, and whether it is a name (see :func:`_is_name`):
    both from one reading of it (the loop judges every call it runs)."""
    if isinstance(value, float):
        return sources.has_number(value), False
    if _DATE.fullmatch(value):
        parts = _DIGITS.findall(value.split("T")[0])
        return all(
            sources.has_number(float(p)) or sources.has_number(float(p) + 2000) for p in parts
        ), False
    if _SUM.fullmatch(value) or _arithmetic(value):  # _SUM: the usual "3+1", at once
        # It may bring its own constants (7 days, 100 for a percentage) but works on at
        # least one number the user gave.
        numbers = sources.numbers
        for n in _DECIMAL.findall(value):
            if round(float(n), 9) in numbers:  # _key(float(n)), inline: n has no sign
                return True, False
        return False, False
    words = _plain_name_words(value)
    if words is None:
        return True, False
    return any(sources.has_word(word) for word in words), not all(w.isdigit() for w in words)


def _arithmetic(text: str) -> bool:
    if not (_OPERATOR.search(text) and _DIGIT.search(text)):
        return False
    if text.isascii() and not _ASCII_LETTER.search(text):  # "3+1": no word to look up
        return True
    return all(word in _MATH_WORDS for word in _LETTERS.findall(text.lower()))


def _name_words(text: str) -> list[str] | None:
    """The words of ``text`` when it reads as a name a user gives (a place, a team, a
    unit: at most :data:`MAX_NAME_WORDS` words); None for a code, a date, arithmetic
    or composed text (code, a path, a sentence)."""
    if _DATE.fullmatch(text) or _arithmetic(text):
        return None
    return _plain_name_words(text)


def _plain_name_words(text: str) -> list[str] | None:
    """:func:`_name_words` of a text already read as neither a date nor arithmetic."""
    if _CODE.fullmatch(text) or _COMPOSED.search(text):
        return None
    words = [w for w in _WORD.findall(text.lower()) if w not in _STOP]
    return words if words and len(words) <= MAX_NAME_WORDS else None


def _is_name(value: float | str) -> bool:
    """A name with letters: "Paris", "NBA Final 2023"; not "42", which is a number."""
    words = _name_words(value) if isinstance(value, str) else None
    return words is not None and not all(word.isdigit() for word in words)


_Judged = list[tuple[str, Any, Mapping[str, Any]]]


def _judged(call: ToolCall, spec: ToolSpec) -> _Judged:
    """The required arguments of ``call`` that a user would give: name, value, schema."""
    plan = _plan(spec)
    if not plan:
        return []  # nothing to judge: the arguments need not even be read
    arguments = _arguments(call)
    return [(name, arguments[name], schema) for name, schema, _ in plan if name in arguments]


#: Each judged parameter: its name, its schema, and whether the schema lists values
#: the model may choose (a default, a constant, choices: see :func:`_neutral`).
_Plan = tuple[tuple[str, Mapping[str, Any], bool], ...]
#: Each spec's judged parameters (see :func:`_plan`), by identity. An entry holds its
#: spec, so that no other object can take its id while it is here; bounded.
_PLANS: dict[int, tuple[ToolSpec, _Plan]] = {}
_MAX_PLANS = 512


def _plan(spec: ToolSpec) -> _Plan:
    """The parameters of ``spec`` judged in its calls: the required ones a user would
    give (not :func:`_model_written`), each with its schema. Read once per spec: the
    loop judges every call, and its tools' specs do not change."""
    entry = _PLANS.get(id(spec))
    if entry is not None and entry[0] is spec:
        return entry[1]
    parameters = _schema(spec.parameters)
    properties = _schema(parameters.get("properties"))
    required = parameters.get("required")
    plan: _Plan = ()
    if isinstance(required, list):
        plan = tuple(
            (name, schema, not _CHOICES.isdisjoint(schema))
            for name in dict.fromkeys(n for n in required if isinstance(n, str))
            if not _model_written(name)
            for schema in (_schema(properties.get(name)),)
        )
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
    _PLANS[id(spec)] = (spec, plan)
    return plan


#: json's scanner, called without raw_decode's Python wrapper.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _arguments(call: ToolCall) -> dict[str, Any]:
    """``call.arguments_dict()``, with the usual well-formed object read in one step."""
    text = call.arguments
    if isinstance(text, str) and text.startswith("{"):
        try:
            value, end = _SCAN(text, 0)
        except (StopIteration, ValueError):
            return {}
        if end == len(text) or not text[end:].strip():
            return value if isinstance(value, dict) else {}
    return call.arguments_dict()


def invented(call: ToolCall, spec: ToolSpec, sources: Sources) -> dict[str, object]:
    """The required arguments of ``call`` whose values ``sources`` never gave, by name;
    empty when every one was given (or is the model's to choose)."""
    return _invented(_judged(call, spec), sources)


def unrelated(call: ToolCall, spec: ToolSpec, sources: Sources) -> bool:
    """True when ``call`` passes a name (a place, a substance, a unit) to a tool that
    shares no word with what the run was given: its name, description, parameters and
    their choices all foreign to the request ("How many sides does a hexagon have?" ->
    ``calculate_boiling_point(substance="hexagon")``). Calls on numbers and arithmetic
    alone are never judged: "What is 2+2?" shares no word with a calculator."""
    return _unrelated(_judged(call, spec), spec, sources)


def assess(call: ToolCall, spec: ToolSpec, sources: Sources) -> tuple[dict[str, object], bool]:
    """:func:`invented` and, when nothing is, :func:`unrelated`, reading the call's
    arguments once and each of their values once (the loop asks both of every call)."""
    values: dict[str, object] = {}
    names = False
    # _judged(call, spec), written out (and _plan's cache read here): the loop asks it
    # of every call.
    entry = _PLANS.get(id(spec))
    plan = entry[1] if entry is not None and entry[0] is spec else _plan(spec)
    if not plan:
        return values, False
    # _arguments(call), whose well-formed object is read here: every call comes here.
    text = call.arguments
    arguments: Mapping[str, Any] | None = None
    if type(text) is str and text.startswith("{"):
        try:
            value, end = _SCAN(text, 0)
        except (StopIteration, ValueError):
            value = None
        else:
            if type(value) is dict and end == len(text):
                arguments = value
    if arguments is None:  # not the usual object (space after it, not JSON): the rest
        arguments = _arguments(call)
    for name, schema, choosable in plan:
        if name not in arguments:
            continue
        value = arguments[name]
        leaves: Iterable[float | str]
        if type(value) is str:  # the usual argument: one leaf, read here at once
            stripped = value.strip()
            chosen = choosable and _neutral(value, schema)
            leaves = (stripped,) if stripped and not chosen else ()
        else:
            leaves = _leaves(value, schema)
        for leaf in leaves:
            given, is_name = _judge_leaf(leaf, sources)
            names = names or is_name
            if not given:
                values[name] = value
                break
    if values:
        return values, False
    return values, names and not any(sources.has_word(word) for word in _tool_words(spec))


def _invented(judged: _Judged, sources: Sources) -> dict[str, object]:
    return {
        name: value
        for name, value, schema in judged
        if not all(_given(leaf, sources) for leaf in _leaves(value, schema))
    }


def _unrelated(judged: _Judged, spec: ToolSpec, sources: Sources) -> bool:
    names = any(_is_name(leaf) for _, value, schema in judged for leaf in _leaves(value, schema))
    return names and not any(sources.has_word(word) for word in _tool_words(spec))


def _tool_words(spec: ToolSpec) -> set[str]:
    """The words a tool is described with: name, description, parameters, choices."""
    texts = [spec.name, spec.description]
    parameters = _schema(spec.parameters)
    for name, schema in _schema(parameters.get("properties")).items():
        schema = _schema(schema)
        choices = schema.get("enum")
        texts += [str(name), str(schema.get("description", ""))]
        texts += [str(c) for c in choices] if isinstance(choices, list) else []
    words: set[str] = set()
    for text in texts:
        for part in _NAME_PART.findall(text[:MAX_SOURCE_CHARS]):
            word = part.lower()
            if len(word) >= 3 and word not in _STOP and not word.isdigit():
                words.add(word)
    return words


@functools.lru_cache(maxsize=1024)
def _model_written(name: str) -> bool:
    """``search_query``, ``userPrompt``, ``task``, ``file_path``: a parameter whose
    value the model writes or places itself."""
    return any(part.lower() in _MODEL_WRITTEN for part in _NAME_PART.findall(name))
