"""Declarative teams: the TOML format, its line-naming errors, writing it back, and
running a team through the run contract and `jarvis ask --team`."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from jarvisd._config import Config
from jarvisd._errors import UsageError
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.patterns import Router, TeamAgent, build_team, parse_team
from jarvisd.runs import AgentSpec, run_spec, validate_spec
from jarvisd.testing import OllamaStandIn
from tests.cli.test_cli import jarvis, use_ollama

TEAM = textwrap.dedent(
    """\
    root = "desk"

    [agents.billing]
    agent = "simple"
    system_prompt = "You handle payments."

    [agents.tech]
    agent = "simple"
    temperature = 0.0

    [agents.critic]
    agent = "simple"

    [patterns.desk]
    pattern = "router"
    routes = ["billing", "polished"]
    descriptions = { billing = "payments", polished = "bugs" }
    fallback = "billing"

    [patterns.polished]
    pattern = "reflective"
    actor = "tech"
    critic = "critic"
    max_rounds = 1
    """
)


def test_a_team_file_is_read_and_written_back_the_same() -> None:
    team = parse_team(TEAM)
    assert team.root == "desk" and set(team.agents) == {"billing", "tech", "critic"}
    assert team.members_of("desk") == ["billing", "polished", "billing"]
    again = parse_team(team.to_toml())
    assert again == team
    assert again.to_toml() == team.to_toml()


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (('routes = ["billing", "polished"]', 'routes = ["billing", "ghost"]'),
         "team.toml:16: [patterns.desk] routes: no agent or pattern named 'ghost'"),
        (('agent = "simple"\nsystem_prompt', 'agnet = "simple"\nsystem_prompt'),
         "team.toml:4: [agents.billing] unknown key 'agnet'"),
        (('pattern = "reflective"', 'pattern = "reflection"'),
         "team.toml:21: [patterns.polished] pattern must be one of"),
        (("max_rounds = 1", "max_rounds = -1"),
         "team.toml:24: [patterns.polished] max_rounds: must be a whole number"),
        (('actor = "tech"', 'actor = "desk"'), "is in a cycle"),
        (('root = "desk"', 'root = "nobody"'), "team.toml:1: root must name"),
        (("max_rounds = 1", "max_rounds = 1 1"), "team.toml:24: not valid TOML"),
        (('[agents.critic]\nagent = "simple"', "[agents.critic]"),
         "team.toml:11: [agents.critic] needs 'agent'"),
    ],
)  # fmt: skip
def test_errors_name_the_line(edit: tuple[str, str], expected: str) -> None:
    assert edit[0] in TEAM
    with pytest.raises(UsageError) as caught:
        parse_team(TEAM.replace(edit[0], edit[1], 1), "team.toml")
    assert expected in str(caught.value)


def test_a_member_named_twice_is_built_once() -> None:
    root = build_team(parse_team(TEAM), ScriptedEngine(), Config())
    assert isinstance(root, Router)
    assert root.routes[0].member is root.fallback


def run_team(text: str, engine: ScriptedEngine, question: str) -> object:
    spec = AgentSpec(input=question, team=text)
    return asyncio.run(run_spec(spec, RunContext(), Config(), engine, trace=False))


def test_a_team_runs_through_the_run_contract() -> None:
    engine = ScriptedEngine.from_replies(["2", "patched the bug", "APPROVED"])
    outcome = run_team(TEAM, engine, "my app crashes")
    assert outcome.failure is None, outcome.failure  # type: ignore[attr-defined]
    assert outcome.answer == "patched the bug"  # type: ignore[attr-defined]
    provenance = outcome.metadata["provenance"]  # type: ignore[attr-defined]
    assert provenance == {"producer": "tech", "delegated": True,
                          "path": ["desk", "polished", "tech"]}  # fmt: skip


def test_the_spec_carries_the_team_and_is_checked_before_it_runs() -> None:
    spec = AgentSpec(input="q", team=TEAM)
    assert AgentSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert validate_spec(spec, Config()) is TeamAgent
    with pytest.raises(UsageError, match="unknown agent 'wizard'"):
        validate_spec(AgentSpec(input="q", team=TEAM.replace('"simple"', '"wizard"')), Config())
    with pytest.raises(UsageError, match="cannot run a team"):
        validate_spec(AgentSpec(input="q", team=TEAM, isolation="sandbox"), Config())


def test_jarvis_ask_team(tmp_path: Path) -> None:
    path = tmp_path / "team.toml"
    path.write_text(TEAM)
    with OllamaStandIn(ScriptedEngine([reply("1"), reply("Refund sent.")])) as standin:
        use_ollama(standin.url)
        out = jarvis("ask", "--no-daemon", "--json", "--team", str(path), "refund me")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["answer"] == "Refund sent."
    assert data["metadata"]["provenance"]["path"] == ["desk", "billing"]


def test_jarvis_ask_team_error_is_one_line_with_the_line_number(tmp_path: Path) -> None:
    path = tmp_path / "team.toml"
    path.write_text(TEAM.replace('fallback = "billing"', 'fallback = "nobody"'))
    out = jarvis("ask", "--no-daemon", "--team", str(path), "hi")
    assert out.returncode == 2
    assert f"{path}:18: [patterns.desk] fallback: no agent or pattern named 'nobody'" in out.stderr
    assert "Traceback" not in out.stderr


def test_trace_show_mermaid_draws_the_real_run() -> None:
    from jarvisd.traces import TraceStore, to_mermaid

    engine = ScriptedEngine.from_replies(["2", "draft", "not yet", "better draft", "APPROVED"])
    spec = AgentSpec(input="my app crashes", team=TEAM.replace("max_rounds = 1", "max_rounds = 2"))
    outcome = asyncio.run(run_spec(spec, RunContext(), Config(), engine))
    assert outcome.answer == "better draft"
    (summary,) = TraceStore().list()
    trace = TraceStore().get(summary.id)
    diagram = to_mermaid(trace.events, trace.agent)
    lines = diagram.splitlines()
    assert lines[0] == "sequenceDiagram"
    ids = {line.split(" as ")[1]: line.split()[1] for line in lines if " as " in line}
    user, desk, polished, tech, critic = (ids[n] for n in ("user", "desk", "polished", "tech",
                                                            "critic"))  # fmt: skip
    body = lines[len(ids) + 1 :]
    assert body[0] == f"    {user}->>{desk}: my app crashes"
    assert body[1] == f"    Note over {desk}: route 2: polished"
    assert body[2].startswith(f"    {desk}->>{polished}:")
    assert f"    Note over {polished}: round 2 of 2" in body
    assert f"    {tech}-->>{polished}: better draft" in body
    assert sum(1 for line in body if line.startswith(f"    {polished}->>{critic}:")) == 2
    assert body[-1] == f"    {desk}-->>{user}: better draft"
    shown = jarvis("trace", "show", summary.id, "--mermaid")
    assert shown.returncode == 0 and shown.stdout == diagram, shown.stderr


def test_mermaid_labels_cannot_inject_syntax() -> None:
    from jarvisd.traces import to_mermaid

    events = [{"type": "agent_turn_start", "data": {"depth": 0, "agent": "a",
               "input": "hi;\nNote over p0: pwned #1 %%{init}%%"}}]  # fmt: skip
    diagram = to_mermaid(events)
    assert diagram.count("\n") == 4  # header, two participants, one message
    assert "pwned" in diagram and ";" not in diagram and "%%" not in diagram


def test_the_readme_team_example_is_a_valid_team() -> None:
    readme = (Path(__file__).parents[2] / "docs" / "composing-agents.md").read_text()
    section = readme.split("## Composing agents", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    team = parse_team(example, "README")
    assert team.root == "desk"
    build_team(team, ScriptedEngine(), Config())
