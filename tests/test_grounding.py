"""Which values of a tool call the conversation never gave (jarvisd._grounding): the
made-up values of calls where no tool fits, against the forms in which users and tool
results really give them."""

from __future__ import annotations

from typing import Any

import pytest

from jarvisd._grounding import MAX_SOURCE_CHARS, Sources, assess, invented, unrelated
from jarvisd._messages import ToolCall, ToolSpec


def spec(*required: str, **properties: dict[str, Any]) -> ToolSpec:
    props = {name: properties.get(name, {"type": "string"}) for name in required}
    props.update(properties)
    return ToolSpec("f", "", {"type": "object", "properties": props, "required": list(required)})


def held(request: str, tool: ToolSpec, **arguments: Any) -> dict[str, Any]:
    return invented(ToolCall.from_arguments(tool.name, arguments), tool, Sources([request]))


# Calls small models made on BFCL's irrelevance set (no offered function fits).
MADE_UP = [
    ("Who won the last world cup in football?", "team_name", "Germany"),
    ("Who is playing basketball at Madison Square Garden tonight?", "date", "2023-04-15"),
    ("What kind of fertilizer is best for growing tomatoes?", "soil_type", "loam"),
    ("Who signed the declaration of independence?", "event_location", "United States"),
    ("Who was the artist behind the painting 'The Scream'?", "museum_location", "Paris, France"),
    ("Who won the NBA Most Valuable Player in 2020?", "player_name", "LeBron James"),
    ("What is the ranking of a football team?", "season", "2023-2024"),
    ("What is the gene sequence for evolutionary changes in whales?", "mutation_rate", 0.01),
    ("Find the best character to use against a dragon in DragonSlayer.", "player_level", 5),
    ("What is the best chess move for white in this position?", "year", 2023),
    ("Which colors should I mix to get a specific shade?", "red", 255),
]


@pytest.mark.parametrize(("request_", "name", "value"), MADE_UP)
def test_a_value_the_request_does_not_give_is_invented(
    request_: str, name: str, value: Any
) -> None:
    tool = spec(name, **({name: {"type": "number"}} if not isinstance(value, str) else {}))
    assert held(request_, tool, **{name: value}) == {name: value}


# Values a correct call carries, in the forms the request gives them.
GIVEN = [
    ("Find concerts in New York.", "location", "New York, NY"),
    ("What's the net worth of Messi?", "name", "Lionel Messi"),
    ("Evolutionary rate of whales", "topic", "evolution"),
    ("Emissions of a gasoline vehicle", "vehicle_type", "gas"),
    ("Revenue of 1,234 units", "units", 1234),
    ("Cash flows [200,300,400,500] at 10%", "cash_flows", [200, 300, 400, 500]),
    ("The roots of 2x^2 + 3x - 4 with coefficients 2, 3 and -4", "c", -4),
    ("A discount rate of 5%", "rate", 0.05),
    ("A grant of 3 million dollars", "amount", 3_000_000),
    ("A budget of 2k", "amount", 2000),
    ("A capacitance of 100µF", "capacitance", 0.0001),
    ("Charges of 1e-9 and 2e-9", "charge", 2e-09),
    ("Air quality in New York for the next week", "days", 7),
    ("Interest compounded quarterly", "n", 4),
    ("Twelve eggs", "count", 12),
    ("The stock price at closing March.11, 2022", "date", "2022-03-11"),
    ("The UV index for Tokyo for tomorrow, June01 2023", "date", "06-01-2023"),
    ("Book from 10th December 2022", "start_date", "10/12/2022"),
    ("Exchange rate from British Pounds to Japanese Yen", "source_currency", "GBP"),
    ("Convert 15 kilometers into miles", "from_unit", "km"),
    ("Convert 15 kilometers into miles", "to_unit", "mi"),
    ("Who won the NBA final 2023?", "battle_name", "NBA Final 2023"),
    ("Plot a sine wave starting from rest", "initial_velocity", 0),
    ("The next month", "months", 1),
]


@pytest.mark.parametrize(("request_", "name", "value"), GIVEN)
def test_a_value_the_request_gives_in_another_form_is_not_invented(
    request_: str, name: str, value: Any
) -> None:
    tool = spec(name, **({name: {"type": "array"}} if isinstance(value, list) else {}))
    assert held(request_, tool, **{name: value}) == {}


@pytest.mark.parametrize(
    ("request_", "expression", "made_up"),
    [
        ("What is 17.5% of 86420?", "17.5% of 86420", False),
        ("A shop sells 1250 units a day at $7 each. Revenue over 6 weeks?", "1250 * 7 * 6", False),
        ("How many seconds are there in a week?", "7 * 24 * 60 * 60", False),
        ("I had 120 apples and gave away a third. How many are left?", "120 - 120 / 3", False),
        ("What is 3.2 x 4.5?", "3.2 x 4.5", False),
        ("What is the capital of France?", "22.5 * 100", True),
        ("What year did World War II end?", "1945 - 1939", True),
        ("How many sides does a hexagon have?", "6", True),
    ],
)
def test_arithmetic_may_bring_constants_but_works_on_a_number_the_user_gave(
    request_: str, expression: str, made_up: bool
) -> None:
    tool = spec("expression")
    assert bool(held(request_, tool, expression=expression)) is made_up


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("task", "count"),  # a sub-agent's task, however terse
        ("search_query", "weather"),
        ("userPrompt", "summarise"),
        ("path", "src/main.py"),
        ("url", "https://example.org/a"),
        ("file_path", "README"),
        ("snippet", "print(sum(range(10)))"),
        ("title", "one two three four five six seven eight"),  # long: composed
    ],
)
def test_text_the_model_composes_is_never_invented(name: str, value: str) -> None:
    assert held("Do it.", spec(name), **{name: value}) == {}


def test_flags_defaults_choices_codes_and_optional_arguments_are_the_model_s_to_choose() -> None:
    tool = spec(
        "unit",
        "verbose",
        "mode",
        "currency",
        unit={"type": "string", "default": "celsius"},
        verbose={"type": "boolean"},
        mode={"type": "string", "enum": ["fast", "exact"]},
        currency={"type": "string"},
        city={"type": "string"},  # not required
    )
    assert held(
        "How warm is it?", tool, unit="celsius", verbose=True, mode="exact", currency="USD",
        city="Atlantis",
    ) == {}  # fmt: skip
    assert held("How warm is it?", tool, unit="kelvin") == {"unit": "kelvin"}


def test_indexing_is_the_same_in_any_order_and_however_often_a_text_comes() -> None:
    # The index skips what it has seen (a number, a short text): never what it has not.
    texts = [request_ for request_, _, _ in GIVEN + MADE_UP]
    once, twice = Sources(texts), Sources([*reversed(texts), *texts])
    apart = [Sources([text]) for text in texts]
    assert once.numbers == twice.numbers == set().union(*(s.numbers for s in apart))
    assert once.words == twice.words == set().union(*(s.words for s in apart))


def test_a_text_read_for_every_run_gives_each_run_what_reading_it_gives_and_no_more() -> None:
    # A short text is read once for all runs (a request comes back run after run): a
    # later run's index is the text's own reading, and what one run adds stays its own.
    text = "Evaluate each of these: 1+1, 3.5 million, 2,500 km, next week, 12%."
    first = Sources([text])
    first.add("Germany won in 2014.")
    read = Sources()
    read._read(text)  # the text read as it is, without the runs' shared reading
    second = Sources([text])
    assert (second.words, second.numbers) == (read.words, read.numbers)
    assert "germany" not in second.words and not second.has_number(2014)
    assert first.has_number(3.5e6) and first.has_number(0.12) and first.has_number(7)


@pytest.mark.parametrize(("request_", "name", "value"), GIVEN + MADE_UP)
def test_assess_answers_both_questions_as_they_are_asked_apart(
    request_: str, name: str, value: Any
) -> None:
    tool = spec(name, **({name: {"type": "array"}} if isinstance(value, list) else {}))
    call, sources = ToolCall.from_arguments(tool.name, {name: value}), Sources([request_])
    values = invented(call, tool, sources)
    assert assess(call, tool, sources) == (values, not values and unrelated(call, tool, sources))


def test_values_from_any_source_count_and_sources_grow() -> None:
    sources = Sources(["Look up the team.", ""])
    call = ToolCall.from_arguments("f", {"team_name": "Germany"})
    assert invented(call, spec("team_name"), sources) == {"team_name": "Germany"}
    sources.add('{"winner": "Germany", "year": 2014}')  # a tool result
    assert invented(call, spec("team_name"), sources) == {}


def test_hostile_schemas_and_values_are_read_without_error() -> None:
    call = ToolCall.from_arguments("f", {"a": "x", "b": [[[[[[[[[[["deep"]]]]]]]]]]]})
    for parameters in (
        {"properties": "nonsense", "required": ["a"]},
        {"properties": {"a": 5}, "required": ["a", 7, None]},
        {"required": "a"},
        [],
    ):
        tool = ToolSpec("f", "", parameters)  # type: ignore[arg-type]
        assert invented(call, tool, Sources(["y"])) in ({}, {"a": "x"})
    deep = ToolSpec("f", "", {"properties": {}, "required": ["b"]})
    assert invented(call, deep, Sources(["y"])) == {}  # past MAX_DEPTH: not a user's value
    # A huge source is read at its two ends only.
    middle = "Germany"
    sources = Sources(["a " * MAX_SOURCE_CHARS + middle + " b" * MAX_SOURCE_CHARS])
    assert not sources.has_word("germany")
    assert Sources(["head Germany " + "a " * MAX_SOURCE_CHARS]).has_word("germany")


def tool(name: str, description: str, **properties: dict[str, Any]) -> ToolSpec:
    parameters = {"type": "object", "properties": properties, "required": list(properties)}
    return ToolSpec(name, description, parameters)


BOILING = tool("calculate_boiling_point", "Boiling point of a substance at a pressure.",
               substance={"type": "string"}, pressure={"type": "number"})  # fmt: skip
CURRENCY = tool("convert_currency", "Convert an amount from one currency to another.",
                amount={"type": "number"}, from_currency={"type": "string"},
                to_currency={"type": "string"})  # fmt: skip
CALCULATOR = tool("calculator", "Evaluate an arithmetic expression.",
                  expression={"type": "string"})  # fmt: skip
WEATHER = tool("get_weather", "Current conditions at a place.",
               city={"type": "string", "description": "A city, e.g. Paris; forecast "
                     "words such as rain or sunny are answered too."})  # fmt: skip
LAW = tool("get_law_categories", "Categories of law.",
           law_type={"type": "string", "enum": ["civil", "criminal", "noise"]})  # fmt: skip


@pytest.mark.parametrize(
    ("request_", "spec_", "arguments", "foreign"),
    [
        # Calls small models made on BFCL's irrelevance set.
        ("How many sides does a hexagon have?", BOILING, {"substance": "hexagon"}, True),
        ("What's 10inch in meter", CURRENCY,
         {"amount": 10, "from_currency": "inch", "to_currency": "meter"}, True),
        # Numbers and arithmetic alone are never judged: "2+2" shares no word with a
        # calculator, nor does a word problem.
        ("What is 2+2?", CALCULATOR, {"expression": "2+2"}, False),
        ("6*7? Check it.", CALCULATOR, {"expression": "42"}, False),
        ("A shop sells 1250 units a day at $7. Revenue over 6 weeks?", CALCULATOR,
         {"expression": "1250 * 7 * 6"}, False),
        # Any word of the tool counts: its name, description, parameters' descriptions
        # and choices, in any form ("sunny" for "sunny", "weathers" for "weather").
        ("Is it sunny in Paris?", WEATHER, {"city": "Paris"}, False),
        ("Any weathers alerts for Oslo?", WEATHER, {"city": "Oslo"}, False),
        ("Can I complain about the noise next door?", LAW, {"law_type": "noise"}, False),
        ("Where is Oslo?", WEATHER, {"city": "Oslo"}, True),
    ],
)  # fmt: skip
def test_a_name_passed_to_a_tool_that_shares_no_word_with_the_request_is_foreign(
    request_: str, spec_: ToolSpec, arguments: dict[str, Any], foreign: bool
) -> None:
    call = ToolCall.from_arguments(spec_.name, arguments)
    assert unrelated(call, spec_, Sources([request_])) is foreign


def test_a_tool_s_words_count_from_any_source_and_hostile_specs_are_read() -> None:
    call = ToolCall.from_arguments("calculate_boiling_point", {"substance": "hexagon"})
    sources = Sources(["How many sides does a hexagon have?"])
    assert unrelated(call, BOILING, sources)
    sources.add("You answer questions on boiling points.")  # the agent's instructions
    assert not unrelated(call, BOILING, sources)
    # A malformed schema reads as none; a spec without "required" judges nothing.
    for parameters, foreign in (
        ({"properties": {"substance": 5}, "required": ["substance"]}, True),
        ({"properties": [], "required": ["substance"]}, True),
        ([], False),
    ):
        hostile = ToolSpec("f", "x" * (2 * MAX_SOURCE_CHARS), parameters)  # type: ignore[arg-type]
        assert unrelated(call, hostile, Sources(["a hexagon"])) is foreign
