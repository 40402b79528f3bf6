"""The run contract: one failure table, one outcome shape, options typed against the
agent, the spec made absolute at the edge, budgets, and `jarvis ask` over a host."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from jarvisd import _errors
from jarvisd._config import AgentConfig, Config
from jarvisd._events import EventType
from jarvisd._messages import ToolResult, Usage
from jarvisd._runcontext import BudgetExceeded, Cancelled, RunContext
from jarvisd.agents import AgentRegistry
from jarvisd.cli import _ask as ask_cli
from jarvisd.cli import cli
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.runs import (
    AgentSpec,
    Failure,
    RunOutcome,
    declared_options,
    exit_code,
    from_wire,
    run_spec,
    to_wire,
)
from jarvisd.runs._failures import CODES
from jarvisd.testing import FakeHost

# -- the one table ------------------------------------------------------------------


@pytest.mark.parametrize("entry", CODES, ids=lambda c: c.code)
def test_every_code_round_trips_to_its_own_class(entry: object) -> None:
    code = entry.code  # type: ignore[attr-defined]
    error = from_wire(code, "what happened")
    assert type(error) is entry.exception  # type: ignore[attr-defined]
    assert to_wire(error) == (code, "what happened")
    assert exit_code(code) == entry.exit_code  # type: ignore[attr-defined]


def test_every_jarvis_error_has_a_code_of_its_own_or_its_parents() -> None:
    for name in _errors.__all__:
        cls = getattr(_errors, name)
        code, _ = to_wire(cls.__new__(cls))
        assert code != "internal", name


def test_unknown_errors_and_codes_are_internal_failures() -> None:
    assert to_wire(KeyError("x")) == ("internal", "KeyError: 'x'")
    error = from_wire("martian", "odd")
    assert type(error) is _errors.JarvisError and "martian" in str(error)
    assert exit_code("martian") == 1
    # The socket layer's own words keep their meaning.
    assert isinstance(from_wire("bad_request", "x"), _errors.UsageError)
    assert isinstance(from_wire("frame_too_large", "x"), _errors.ProtocolError)


def test_signals_and_exit_codes() -> None:
    assert to_wire(Cancelled("stop"))[0] == "cancelled" and exit_code("cancelled") == 130
    assert to_wire(BudgetExceeded("spent"))[0] == "budget" and exit_code("budget") == 1
    assert exit_code("engine_unavailable") == 3 and exit_code("sandbox_unavailable") == 3
    assert exit_code("usage") == 2 and exit_code("mount_refused") == 2


# -- the outcome --------------------------------------------------------------------


def test_outcome_round_trips_and_refuses_garbage() -> None:
    outcome = RunOutcome(
        answer="42", agent="orchestrator", engine="ollama", model="m", turns=2,
        usage=Usage(3, 4), tool_results=(ToolResult("calculator", "42", call_id="c1"),),
        metadata={"k": 1}, duration_s=0.5,
    )  # fmt: skip
    assert RunOutcome.from_dict(json.loads(json.dumps(outcome.to_dict()))) == outcome
    failed = RunOutcome(failure=Failure("budget", "spent"))
    assert RunOutcome.from_dict(failed.to_dict()) == failed and failed.exit_code == 1
    for bad in ({"usage": []}, {"tool_results": {}}, {"failure": "x"}, {"turns": "many"}):
        with pytest.raises(_errors.ProtocolError):
            RunOutcome.from_dict(bad)


# -- the spec -----------------------------------------------------------------------


def test_spec_is_made_absolute_and_carries_the_engine_environment(tmp_path: Path) -> None:
    spec = AgentSpec("q", mounts=("rel/dir:rw", "other"), context_file="notes.txt")
    edge = spec.at_edge({"OLLAMA_HOST": "http://10.0.0.1:1", "OPENAI_API_KEY": "secret"})
    assert all(Path(m.rpartition(":")[0] or m).is_absolute() for m in edge.mounts)
    assert edge.mounts[0].endswith("/rel/dir:rw")
    assert Path(edge.context_file or "").is_absolute()
    assert edge.env == {"OLLAMA_HOST": "http://10.0.0.1:1"}  # never a secret
    assert AgentSpec.from_dict(edge.to_dict()) == edge


@pytest.mark.parametrize(
    "field, value",
    [("input", 3), ("max_turns", True), ("temperature", "hot"), ("env", {"A": 1}),
     ("tools", "calculator"), ("options", [1]), ("sandbox", "yes"), ("surprise", 1)],
)  # fmt: skip
def test_bad_spec_fields_are_refused_by_name(field: str, value: object) -> None:
    with pytest.raises(_errors.UsageError, match=field):
        AgentSpec.from_dict({"input": "q", field: value})


def test_a_spec_from_the_wire_cannot_ask_for_the_sandbox_and_none() -> None:
    # The daemon reads specs from any client of its socket, not only from the CLI.
    with pytest.raises(_errors.UsageError, match="'sandbox' and 'no_sandbox' contradict"):
        AgentSpec.from_dict({"input": "q", "sandbox": True, "no_sandbox": True})
    assert AgentSpec.from_dict({"input": "q", "no_sandbox": True}).isolation == "host"


# -- options ------------------------------------------------------------------------


def test_agents_declare_their_options_by_their_constructors() -> None:
    orchestrator = declared_options(AgentRegistry.get("orchestrator"))
    assert orchestrator["mode"].choices == ("function_calling", "structured")
    rlm = declared_options(AgentRegistry.get("rlm"))
    assert {"sub_model", "max_depth", "exec_timeout"} <= set(rlm)
    assert rlm["max_depth"].kind is int and rlm["chunk_chars"].optional
    for reserved in ("tools", "executor", "temperature", "max_turns"):
        assert reserved not in rlm


def test_options_are_typed_and_unknown_ones_refused_with_the_list() -> None:
    engine = ScriptedEngine.from_replies(['{"final_answer": "structured!"}'])
    spec = AgentSpec("q", agent="orchestrator", options={"mode": "structured"})
    outcome = asyncio.run(run_spec(spec, RunContext(), Config(), engine))
    assert outcome.answer == "structured!"
    for options, message in (
        ({"nope": "1"}, "has no option 'nope' (its options: mode"),
        ({"mode": "fast"}, "must be one of function_calling, structured"),
        ({"max_repeats": "many"}, "must be an integer"),
    ):
        spec = AgentSpec("q", agent="orchestrator", options=options)
        outcome = asyncio.run(run_spec(spec, RunContext(), Config(), ScriptedEngine([])))
        assert outcome.failure is not None and outcome.failure.code == "usage"
        assert message in outcome.failure.message


# -- run_spec -----------------------------------------------------------------------


def test_a_run_without_an_answer_is_a_failure_with_an_empty_answer() -> None:
    engine = ScriptedEngine.from_replies(['{"name": "calculator", "argu', '{"name": "calculator"'])
    spec = AgentSpec("q", agent="orchestrator", tools=("calculator",))
    outcome = asyncio.run(run_spec(spec, RunContext(), Config(), engine))
    assert outcome.answer == ""
    assert outcome.failure is not None and outcome.failure.code == "no_answer"
    assert "could not be used twice in a row" in outcome.failure.message
    assert outcome.exit_code == 1 and outcome.turns == 2


@pytest.mark.parametrize("budget", ["max_calls", "max_tokens_total", "max_tool_calls"])
def test_budgets_from_the_spec_stop_the_run(budget: str) -> None:
    replies = [reply("", ("calculator", {"expression": "1+1"})), reply("two")]
    engine = ScriptedEngine(replies)
    value = {"max_calls": 1, "max_tokens_total": 1, "max_tool_calls": 0}[budget]
    spec = AgentSpec(
        "1+1 and 2+2?", agent="orchestrator", tools=("calculator",), **{budget: value or None}
    )
    if budget == "max_tool_calls":  # 0 is "unlimited" on the spec: set it on the config
        config = Config(agent=AgentConfig(max_tool_calls=1))
        engine = ScriptedEngine([replies[0], reply("", ("calculator", {"expression": "2+2"})),
                                 reply("x")])  # fmt: skip
    else:
        config = Config()
    outcome = asyncio.run(run_spec(spec, RunContext(), config, engine))
    assert outcome.failure is not None and outcome.failure.code == "budget", outcome


def test_the_wall_clock_budget_is_a_budget_stop_not_a_cancel() -> None:
    engine = ScriptedEngine.from_replies(["late"], latency_s=5)
    spec = AgentSpec("q", agent="simple", max_wall=0.2)
    outcome = asyncio.run(run_spec(spec, RunContext(), Config(), engine))
    assert outcome.failure == Failure("budget", "wall-clock budget of 0.2 s spent")


def test_a_run_stopped_mid_reply_counts_the_replies_it_got_and_the_one_in_flight() -> None:
    """A code run stopped by its wall clock after 600 s of a real model's replies said
    0 turns. Each reply takes 1 s; the clock stops the run during one of them: every
    call the engine saw is a turn, the one cut short included."""
    calc = [reply("", ("calculator", {"expression": f"{i}+1"})) for i in range(20)]
    spec = AgentSpec("Add 1 to 0, 1, 2 and so on.", agent="orchestrator",
                     tools=("calculator",), max_wall=2.5)  # fmt: skip
    engine = ScriptedEngine(calc, latency_s=1.0)
    outcome = asyncio.run(run_spec(spec, RunContext(), Config(), engine))
    assert outcome.failure == Failure("budget", "wall-clock budget of 2.5 s spent")
    assert len(engine.calls) >= 1 and outcome.turns == len(engine.calls), outcome


def test_a_stopped_run_returns_a_budget_failure_with_the_usage_spent_and_warned_first() -> None:
    calc = [reply("", ("calculator", {"expression": f"{i}+1"})) for i in range(5)]
    spec = AgentSpec("Add 1 to 0, 1, 2, 3 and 4.", agent="orchestrator", tools=("calculator",),
                     max_calls=4)  # fmt: skip
    run = RunContext()
    warned: list[dict[str, object]] = []
    run.bus.subscribe(lambda e: warned.append(dict(e.data)), EventType.BUDGET_WARNING)
    config = Config(agent=AgentConfig(budget_warning=0.5))
    outcome = asyncio.run(run_spec(spec, run, config, ScriptedEngine(calc)))
    assert outcome.failure == Failure("budget", "call budget of 4 engine calls spent")
    assert outcome.answer == "" and outcome.usage == Usage(40, 4)  # what the 4 calls used
    assert outcome.turns == 4  # the fifth call, refused, never started
    assert warned == [{"dimension": "calls", "used": 2, "limit": 4, "warn_at": 0.5}]


def test_the_callers_ollama_host_decides_not_this_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "http://127.0.0.1:9")
    spec = AgentSpec("q", engine="ollama", env={"OLLAMA_HOST": "http://127.0.0.1:7"})
    outcome = asyncio.run(run_spec(spec, RunContext(), Config()))
    assert outcome.failure is not None and outcome.failure.code == "engine_unavailable"
    assert "127.0.0.1:7" in outcome.failure.message


# -- the CLI over a host ------------------------------------------------------------


def use_host(monkeypatch: pytest.MonkeyPatch, host: FakeHost) -> None:
    monkeypatch.setattr(ask_cli, "pick_host", lambda no_daemon: [host])


def test_ask_streams_then_exits_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    host = FakeHost([RunOutcome(answer="Paris is the capital.")], chunk=4)
    use_host(monkeypatch, host)
    result = CliRunner().invoke(cli, ["ask", "--option", "mode=structured", "capital?"])
    assert result.exit_code == 0 and result.output == "Paris is the capital.\n"
    assert host.specs[0].options == {"mode": "structured"}  # typed by the run


def test_ask_failure_exits_with_its_code_and_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    use_host(monkeypatch, FakeHost([RunOutcome(failure=Failure("no_answer", "unusable"))]))
    result = CliRunner().invoke(cli, ["ask", "--json", "q"])
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["answer"] == "" and out["failure"] == {"code": "no_answer", "message": "unusable"}
    assert result.stderr.strip() == "jarvis: error: unusable"


def test_ask_falls_back_only_when_the_daemon_cannot_be_reached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    daemon = FakeHost([_errors.DaemonUnavailable("no jarvisd")])
    local = FakeHost([RunOutcome(answer="local")])
    monkeypatch.setattr(ask_cli, "pick_host", lambda no_daemon: [daemon, local])
    assert CliRunner().invoke(cli, ["ask", "q"]).output == "local\n"
    # Lost after the question was sent: an error, never a second run.
    daemon = FakeHost(
        [_errors.DaemonError("lost the connection to jarvisd while it was answering")]
    )
    local = FakeHost([RunOutcome(answer="again")])
    monkeypatch.setattr(ask_cli, "pick_host", lambda no_daemon: [daemon, local])
    result = CliRunner().invoke(cli, ["ask", "q"])
    assert result.exit_code == 1 and not local.specs


def test_ask_shows_tool_calls_as_status_lines_on_stderr_when_piped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Calls(FakeHost):
        def run(self, spec: AgentSpec, run: RunContext) -> RunOutcome:
            from jarvisd._events import EventType

            run.bus.publish(EventType.TOOL_CALL_START, tool="calculator",
                            arguments={"expression": "6*7"}, call_id="1")  # fmt: skip
            return super().run(spec, run)

    use_host(monkeypatch, Calls([RunOutcome(answer="42")]))
    result = CliRunner().invoke(cli, ["ask", "q"])
    assert result.stdout == "42\n"
    assert result.stderr == '· calculator {"expression": "6*7"}\n'


def test_ask_strips_escape_sequences_on_a_terminal_only() -> None:
    from jarvisd.cli._terminal import for_terminal

    hostile = "ok\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x1b[0m\r\n\x9b1m\ttab"
    assert for_terminal(hostile) == "okred\n1m\ttab"
    assert for_terminal("plain\ntext") == "plain\ntext"


@pytest.mark.parametrize(
    "code, error",
    [("store_failed", _errors.StoreError), ("queue_full", _errors.QueueFull),
     ("not_found", _errors.TaskNotFound), ("bad_request", _errors.UsageError),
     ("denied", _errors.DaemonError)],
)  # fmt: skip
def test_the_daemon_client_raises_what_an_error_reply_stands_for(
    code: str, error: type[BaseException]
) -> None:
    from jarvisd.daemon._client import raise_for_error
    from jarvisd.daemon._protocol import ErrorReply

    with pytest.raises(error) as raised:
        raise_for_error(ErrorReply(id="c1", code=code, message="what happened"))
    assert type(raised.value) is error and "what happened" in str(raised.value)


def test_a_sandboxed_programs_failure_is_mapped_and_clipped() -> None:
    from jarvisd.runs._sandboxed import MAX_ERROR_CHARS, _in_the_sandbox

    huge = "x" * 10_000_000
    error = _in_the_sandbox(Failure("engine_unavailable", huge))
    assert isinstance(error, _errors.EngineUnavailable)
    assert len(str(error)) < MAX_ERROR_CHARS + 200
    odd = _in_the_sandbox(Failure("martian" * 100, "odd"))
    assert isinstance(odd, _errors.SandboxError) and len(str(odd)) < 200
    assert isinstance(_in_the_sandbox(Failure("budget", "spent")), BudgetExceeded)


def test_no_parameter_in_runs_is_typed_any() -> None:
    import ast

    import jarvisd.runs

    found = []
    for path in Path(jarvisd.runs.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                args += [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
                for arg in args:
                    if arg.annotation is not None and "Any" in ast.unparse(arg.annotation):
                        found.append(f"{path.name}:{node.lineno} {node.name}({arg.arg})")
    assert not found, found
