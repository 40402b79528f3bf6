"""The egress wiring without a container: config, the spec, the refusals at the edge,
and a run's proxy (the real ``EgressProxy``) handing its events to the run's loop.
(The real sandbox, and the escapes, are in ``test_egress.py``.)"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
from typing import Any

import pytest

from jarvisd._config import parse_config
from jarvisd._errors import ConfigError, UsageError
from jarvisd._events import Event, EventType
from jarvisd._runcontext import RunContext
from jarvisd.cli._run_options import split_hosts
from jarvisd.runs import AgentSpec, _execute, validate_spec
from jarvisd.sandbox._egress import SOCKET_INSIDE, forward_args, proxy_env
from jarvisd.sandbox._netrun import NetSummary, network_policy
from jarvisd.sandbox._policy import prelude_argv


def test_config_network_is_checked_and_merged() -> None:
    config = parse_config(
        {
            "sandbox": {
                "network": {
                    "allow": ["pypi.org", "*.pythonhosted.org"],
                    "deny": ["evil.pypi.org"],
                    "hosts": {"mirror.lan": "10.0.0.5"},
                }
            },
            "agents": {"network": {"codex": ["api.openai.com"]}},
        }
    )
    policy = network_policy(config, ("mirror.lan:8080",), agent="codex")
    assert not policy.empty
    assert policy.decide("api.openai.com", 443).allowed
    assert policy.decide("mirror.lan", 8080).allowed
    assert not policy.decide("evil.pypi.org", 443).allowed  # deny wins
    assert not network_policy(config, (), agent="other").decide("api.openai.com", 443).allowed
    assert network_policy(parse_config({})).empty  # the default: nothing


@pytest.mark.parametrize(
    "data, key",
    [
        ({"sandbox": {"network": {"allow": ["http://x.org/path"]}}}, "sandbox.network.allow[0]"),
        ({"sandbox": {"network": {"hosts": {"a.test": "not-an-ip"}}}}, "sandbox.network.hosts"),
        ({"sandbox": {"network": {"allow": "pypi.org"}}}, "sandbox.network.allow"),
        ({"agents": {"network": {"codex": ["a b"]}}}, "agents.network.codex"),
    ],
)
def test_config_network_errors_name_the_key(data: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    assert key in str(caught.value)


def test_spec_keeps_allow_net_across_the_wire() -> None:
    spec = AgentSpec(input="x", isolation="sandbox", allow_net=("pypi.org", "a.test:81"))
    assert AgentSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(UsageError, match="allow_net"):
        AgentSpec.from_dict({"input": "x", "allow_net": "pypi.org"})
    assert split_hosts(("a,b", " c ", ",")) == ("a", "b", "c")


def test_allow_net_refused_for_a_run_on_the_host() -> None:
    config = parse_config({})
    with pytest.raises(UsageError, match="--allow-net"):
        validate_spec(AgentSpec(input="x", agent="simple", allow_net=("a.org",)), config)
    with pytest.raises(UsageError, match="--allow-net"):
        validate_spec(
            AgentSpec(input="x", agent="opencode", isolation="host", allow_net=("a.org",)), config
        )
    validate_spec(
        AgentSpec(input="x", agent="simple", isolation="sandbox", allow_net=("a.org",)), config
    )
    with pytest.raises(UsageError, match=r"--allow-net: allow: .*'http://a\.org/'"):
        validate_spec(
            AgentSpec(input="x", agent="simple", isolation="sandbox", allow_net=("http://a.org/",)),
            config,
        )


def test_sandbox_side_arguments() -> None:
    env = proxy_env()
    assert env["HTTPS_PROXY"] == env["https_proxy"] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == "localhost,127.0.0.1,::1"
    assert env["GIT_CONFIG_KEY_0"] == "http.proxy" and env["npm_config_https_proxy"]
    argv = prelude_argv(["python3", "x.py"], forward=forward_args(10001, 10001))
    assert argv[-2:] == ["python3", "x.py"]
    assert argv[argv.index("--forward") + 1 : argv.index("--")] == [
        SOCKET_INSIDE, "3128", "10001", "10001",
    ]  # fmt: skip
    assert prelude_argv(["python3", "x.py"]) == ["python3", "x.py"]  # nothing to do first


def test_summary_line() -> None:
    summary = NetSummary(connections=3, refused=1, refused_hosts=["evil.com:443"])
    assert summary.line() == "network: 3 connections, 1 refused (evil.com:443)"
    assert NetSummary.from_dict(summary.to_dict()) == summary
    assert NetSummary(connections=1).line() == "network: 1 connection"


def _connect(path: str, target: str) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(path)
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        return sock.recv(400)


def test_a_sandboxed_run_gets_a_proxy_and_its_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_spec starts the run's proxy, shows its socket to the run (where its
    sandboxes mount it), publishes each connection as net_connect on the run's bus
    from the proxy's thread, summarizes them in the outcome, and removes the socket."""
    seen: dict[str, Any] = {}

    async def sandboxed(spec: AgentSpec, run: RunContext, *args: Any, **kw: Any) -> Any:
        # Stands in for the agent's sandbox: what it would send through its forwarder.
        seen["socket"] = run.egress
        seen["reply"] = await asyncio.to_thread(_connect, run.egress, "evil.test:443")
        return _execute.RunOutcome(answer="done")

    monkeypatch.setattr(_execute, "run_agent", sandboxed)
    run = RunContext()
    events: list[Event] = []
    run.bus.subscribe(events.append, EventType.NET_CONNECT)
    spec = AgentSpec(input="x", agent="simple", isolation="sandbox", allow_net=("pypi.test",))
    outcome = asyncio.run(_execute.run_spec(spec, run, parse_config({})))
    assert seen["reply"].startswith(b"HTTP/1.1 403"), seen
    assert [e.data["host"] for e in events] == ["evil.test"]
    assert events[0].data["allowed"] is False and events[0].data["port"] == 443
    assert outcome.metadata["network"]["line"] == "network: 1 connection, 1 refused (evil.test:443)"
    assert run.egress == ""
    assert not os.path.exists(seen["socket"])


def test_no_policy_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing allowed: no proxy, no socket, no summary (today's behaviour); the
    policy module is not even consulted."""

    async def sandboxed(spec: AgentSpec, run: RunContext, *args: Any, **kw: Any) -> Any:
        assert run.egress == ""
        return _execute.RunOutcome(answer="done")

    monkeypatch.setattr(_execute, "run_agent", sandboxed)

    def no_proxy(*args: Any, **kw: Any) -> None:
        raise AssertionError("a proxy was started")

    monkeypatch.setattr("jarvisd.sandbox._netrun.RunNetwork.__init__", no_proxy)
    spec = AgentSpec(input="x", agent="simple", isolation="sandbox")
    outcome = asyncio.run(_execute.run_spec(spec, RunContext(), parse_config({})))
    assert "network" not in outcome.metadata


def test_backend_none_says_no_policy_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    async def sandboxed(spec: AgentSpec, run: RunContext, *args: Any, **kw: Any) -> Any:
        assert run.egress == ""  # nothing to mount: there is no sandbox
        return _execute.RunOutcome(answer="done")

    monkeypatch.setattr(_execute, "run_agent", sandboxed)
    config = dataclasses.replace(
        parse_config({}),
        sandbox=dataclasses.replace(parse_config({}).sandbox, backend="none"),
    )
    spec = AgentSpec(input="x", agent="simple", isolation="sandbox", allow_net=("pypi.org",))
    outcome = asyncio.run(_execute.run_spec(spec, RunContext(), config))
    assert "no network policy applies" in outcome.metadata["network"]["warning"]


def test_task_logs_show_a_connection() -> None:
    from jarvisd.cli._task import format_event

    data = {"host": "evil.test", "port": 443, "allowed": False, "reason": "not in the allowlist",
            "bytes_up": 0, "bytes_down": 0}  # fmt: skip
    line = format_event(7, "net_connect", data)
    assert line == "[7] net REFUSED evil.test:443 (not in the allowlist) up 0 B, down 0 B"


def test_a_bad_entry_is_the_runs_failure_not_an_exception() -> None:
    """run_spec returns a run's failure, never raises it: a bad entry that reached it
    (a task queued by an older client) fails the run naming the entry."""
    spec = AgentSpec(input="x", agent="simple", isolation="sandbox", allow_net=("http://a.org/",))
    outcome = asyncio.run(_execute.run_spec(spec, RunContext(), parse_config({})))
    assert outcome.failure is not None and "http://a.org/" in outcome.failure.message


def test_jarvis_code_takes_allow_net_and_prints_the_network_line(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`jarvis code run --allow-net`: the hosts travel in the run's spec, and the
    outcome's network summary is one line on stderr (and a key in --json)."""
    import json

    from click.testing import CliRunner

    from jarvisd.cli import cli
    from jarvisd.runs import LocalHost, RunOutcome

    seen: list[AgentSpec] = []
    summary = NetSummary(connections=3, refused=1, refused_hosts=["evil.test:443"])

    def run(self: Any, spec: AgentSpec, context: RunContext) -> RunOutcome:
        seen.append(spec)
        return RunOutcome(answer="done", metadata={"network": summary.to_dict()})

    monkeypatch.setattr(LocalHost, "run", run)
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("a\n")
    args = ["code", "run", "--no-daemon", "--allow-net", "pypi.org,a.test:81", str(project), "do"]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    assert seen[0].allow_net == ("pypi.org", "a.test:81")
    assert "network: 3 connections, 1 refused (evil.test:443)" in done.stderr
    done = CliRunner().invoke(cli, [*args[:2], "--json", *args[2:]])
    assert json.loads(done.stdout)["network"]["refused_hosts"] == ["evil.test:443"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the hand-over to the sandbox uid is root's")
def test_only_the_socket_is_handed_to_the_sandbox_user() -> None:
    """As root the proxy's directory stays ours (0711: traversable for bwrap, which
    mounts as the sandbox user, never writable by it); only the 0600 socket is the
    sandbox user's. A directory it owned would let a host account with that uid put
    its own socket in the proxy's place."""
    from jarvisd.netpolicy import NetPolicy
    from jarvisd.sandbox._netrun import RunNetwork

    async def main() -> tuple[os.stat_result, os.stat_result]:
        policy = NetPolicy.parse(allow=["example.org"], source="--allow-net")
        async with RunNetwork(policy, uid=10001, gid=10001) as net:
            path = net.socket_path
            return os.lstat(os.path.dirname(path)), os.lstat(path)

    directory, sock = asyncio.run(main())
    assert (directory.st_uid, directory.st_mode & 0o777) == (0, 0o711)
    assert (sock.st_uid, sock.st_mode & 0o777) == (10001, 0o600)
