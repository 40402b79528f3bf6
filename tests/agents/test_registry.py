"""Third-party agents, tools and engines through entry points (a real distribution on
``sys.path``, found by importlib.metadata), and names that are taken being refused."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from jarvisd._config import Config
from jarvisd._errors import UsageError
from jarvisd._plugins import PluginError
from jarvisd.agents import AgentRegistry, BaseAgent
from jarvisd.cli import cli
from jarvisd.engines import Engine, ScriptedEngine
from jarvisd.engines._select import build_engine, engine_names
from jarvisd.tools import ToolRegistry, build_tools

PLUGIN = '''
from jarvisd.agents import AgentResult, BaseAgent
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.tools import BaseTool
from jarvisd._messages import ToolSpec


class EchoAgent(BaseAgent):
    """Echo: answers with its input."""

    agent_id = "echo"

    async def arun(self, input, context=None, *, run=None):
        return AgentResult(content=input.upper(), turns=1)


class ShoutTool(BaseTool):
    tool_id = "shout"

    @property
    def spec(self):
        return ToolSpec("shout", "Upper-cases text.", {
            "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})

    def execute(self, **params):
        return params["text"].upper()


def make_engine(config, model=""):
    return ScriptedEngine([reply("canned")], model_name=model or "canned")
'''


def distribution(site: Path, name: str, entry_points: str, module: str = "") -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    if module:
        (site / f"{name}.py").write_text(module)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(AgentRegistry, "_registered", {})
    yield root
    for name in [m for m in sys.modules if m.startswith("jvplugin")]:
        del sys.modules[name]


def test_third_party_agents_tools_and_engines_come_from_entry_points(site: Path) -> None:
    distribution(site, "jvplugin_good", """
        [jarvisd.agents]
        echo = jvplugin_good:EchoAgent
        [jarvisd.tools]
        shout = jvplugin_good:ShoutTool
        [jarvisd.engines]
        canned = jvplugin_good:make_engine
    """, PLUGIN)  # fmt: skip

    keys = AgentRegistry.keys()
    assert "echo" in keys and "simple" in keys
    agent = AgentRegistry.create("echo", ScriptedEngine())
    assert asyncio.run(agent.arun("hi")).content == "HI"
    with pytest.raises(UsageError, match="does not accept tools"):
        AgentRegistry.create("echo", ScriptedEngine(), tools=build_tools(["shout"], Config()))

    assert "shout" in ToolRegistry.keys()  # noqa: SIM118 - a classmethod, not a dict
    runner = CliRunner()
    out = runner.invoke(cli, ["tools", "run", "shout", '{"text": "quiet"}'])
    assert out.exit_code == 0 and out.output.strip() == "QUIET"
    listed = json.loads(runner.invoke(cli, ["agents", "list", "--json"]).output)
    echo = next(row for row in listed if row["key"] == "echo")
    assert echo["accepts_tools"] is False and echo["description"].startswith("Echo")

    assert "canned" in engine_names()
    engine = build_engine("canned", Config(), "m")
    assert isinstance(engine, Engine) and engine.default_model() in ("", "m")


@pytest.mark.parametrize(
    ("group", "name", "listing"),
    [
        ("jarvisd.agents", "orchestrator", lambda: AgentRegistry.keys()),
        ("jarvisd.tools", "calculator", lambda: ToolRegistry.keys()),
        ("jarvisd.engines", "ollama", engine_names),
    ],
)
def test_a_plugin_that_claims_a_built_in_name_is_refused(
    site: Path, group: str, name: str, listing: object
) -> None:
    distribution(site, "jvplugin_bad", f"[{group}]\n{name} = jvplugin_bad:Impostor\n")
    with pytest.raises(PluginError, match=f"claims the name '{name}'"):
        listing()  # type: ignore[operator]


def test_two_plugins_with_one_name_are_refused(site: Path) -> None:
    distribution(site, "jvplugin_one", "[jarvisd.tools]\nshout = jvplugin_one:ShoutTool\n")
    distribution(site, "jvplugin_two", "[jarvisd.tools]\nshout = jvplugin_two:ShoutTool\n")
    with pytest.raises(PluginError, match="claims the name 'shout'"):
        ToolRegistry.keys()


def test_register_refuses_taken_keys(site: Path) -> None:
    class Mine(BaseAgent):
        async def arun(self, input, context=None, *, run=None):  # type: ignore[no-untyped-def]
            raise NotImplementedError

    class Other(Mine):
        pass

    for taken in ("orchestrator", "react"):
        with pytest.raises(UsageError, match="built-in"):
            AgentRegistry.register(taken)(Mine)
    assert AgentRegistry.register("mine")(Mine) is Mine
    assert AgentRegistry.register("mine")(Mine) is Mine  # the same class again is fine
    with pytest.raises(UsageError, match="already registered"):
        AgentRegistry.register("mine")(Other)
    assert AgentRegistry.get("mine") is Mine
    assert "mine" in AgentRegistry.keys()  # noqa: SIM118 - a classmethod, not a dict
    # An entry point that claims a registered key is refused too.
    distribution(site, "jvplugin_clash", "[jarvisd.agents]\nmine = jvplugin_clash:Mine\n")
    with pytest.raises(PluginError, match="claims the name 'mine'"):
        AgentRegistry.keys()


@pytest.mark.parametrize("agent_id", ["claude_code", "openhands"])
def test_an_external_agent_without_a_usable_workspace_is_refused_before_it_starts(
    agent_id: str, tmp_path: Path
) -> None:
    """No workspace, a relative one, a file: each a usage error naming the agent, raised
    before any install, bridge or sandbox work."""
    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    cases = {
        "": "give one with --option workspace=DIR",
        "relative/dir": "must be an existing absolute directory",
        str(afile): "must be an existing absolute directory",
        str(tmp_path / "missing"): "must be an existing absolute directory",
    }
    for workspace, message in cases.items():
        agent = AgentRegistry.create(agent_id, ScriptedEngine(), workspace=workspace)
        with pytest.raises(UsageError, match=message) as raised:
            asyncio.run(agent.arun("edit"))
        assert agent_id in str(raised.value)
