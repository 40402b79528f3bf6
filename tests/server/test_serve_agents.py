"""``jarvis serve``: agents and teams served as models, driven by the official ``openai``
client on a scripted engine (issue 34): streamed answers, the whole run's usage, tool
calls as ``jarvis.events`` and never in the answer, budgets from ``metadata``, a client
that hangs up or never reads cancels its run, and the caller rules (Host, Origin, token)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import openai
import pytest

from jarvisd._config import AgentConfig, Config
from jarvisd._messages import Message, SamplingOptions, StreamChunk, ToolSpec
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.http.serve import OllamaServer, ServedAgents
from jarvisd.http.serve import _agents as served_mod

TOKEN = "t" * 24
TEAM = """\
root = "both"

[agents.a]
agent = "simple"

[agents.b]
agent = "simple"

[patterns.both]
pattern = "parallel"
members = ["a", "b"]
"""


def answer_to_last(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Any:
    return reply("answer to " + messages[-1].content)


def wait_for(predicate: Any, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def serving(engine: Any, **values: Any) -> OllamaServer:
    values.setdefault("agents", ("orchestrator", "simple"))
    values.setdefault("teams", {"pair": TEAM})
    values.setdefault("tools", ("calculator",))
    config = values.pop("config", Config())
    agents = ServedAgents(config, **values)
    return OllamaServer(engine, port=0, agents=agents, token=TOKEN)


def client_of(server: OllamaServer, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=TOKEN, max_retries=0, **kw)


USER = [{"role": "user", "content": "What is 17*23?"}]


def test_the_openai_client_streams_a_team_and_the_orchestrator_with_its_tool_calls() -> None:
    engine = ScriptedEngine(
        [reply("", ("calculator", {"expression": "17*23"})), reply("It is 391.")],
        fallback=answer_to_last,
    )
    with serving(engine) as server:
        client = client_of(server)
        ids = [m.id for m in client.models.list()]
        assert ids == ["scripted", "agent:orchestrator", "agent:simple", "team:pair"]

        # agent:orchestrator: the calculator runs here; the client sees its events only
        # in the jarvis field, and the answer's text only in the deltas.
        text, events, usage = "", [], None
        stream = client.chat.completions.create(
            model="agent:orchestrator", messages=USER, stream=True
        )  # type: ignore[call-overload]
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            events += (chunk.model_extra or {}).get("jarvis", {}).get("events", [])
            usage = chunk.usage or usage
        assert text == "It is 391."
        kinds = [e["type"] for e in events]
        assert kinds == ["tool_call_start", "tool_call_end"]
        assert events[1]["data"]["tool"] == "calculator" and "391" in json.dumps(events[1])
        assert usage is not None and usage.total_tokens == 2 * 10 + 1 + 3  # both calls

        # team:pair, streamed: the team's answer arrives whole, its members as events.
        text, kinds = "", []
        for chunk in client.chat.completions.create(model="team:pair", stream=True,
                                                    messages=[{"role": "user", "content": "hello"}]):  # fmt: skip
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
            kinds += [e["type"] for e in (chunk.model_extra or {}).get("jarvis", {}).get("events", [])]  # fmt: skip
        assert text == "## a\nanswer to hello\n\n## b\nanswer to hello"
        assert kinds.count("member_start") == 2 and kinds.count("member_end") == 2

        # Not streamed: the answer, the run's usage, the events and the run beside it.
        done = client.chat.completions.create(
            model="agent:simple",
            messages=[{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "hi"},
                      {"role": "assistant", "content": "hello"},
                      {"role": "user", "content": "again"}],
        )  # fmt: skip
        task = engine.calls[-1].messages[-1].content
        assert task == ("Instructions from the client:\nBe brief.\n\nThe conversation so far:\n"
                        "user: hi\nassistant: hello\n\nThe current request:\nagain")  # fmt: skip
        assert done.choices[0].message.content == "answer to " + task
        assert done.usage is not None and done.usage.prompt_tokens == 10
        assert (done.model_extra or {})["jarvis"]["run"]["agent"] == "simple"
    assert server.agents is not None and server.agents.active == 0


def test_budgets_come_from_max_tokens_and_metadata_and_stop_the_run() -> None:
    engine = ScriptedEngine([reply("", ("calculator", {"expression": "17*23"}))] * 3,
                            fallback=answer_to_last)  # fmt: skip
    with serving(engine, config=Config(agent=AgentConfig(max_calls=50))) as server:
        client = client_of(server)
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="agent:orchestrator", messages=USER,
                                           max_tokens=7, metadata={"jarvis_max_calls": "2"})  # fmt: skip
        assert caught.value.status_code == 402  # a spent budget: not worth a retry
        assert "2 engine calls" in caught.value.message
        assert len(engine.calls) == 2 and engine.calls[0].options.max_tokens == 7
        # A client lowers the server's caps, never raises them.
        spec = server.agents.spec({"model": "agent:simple", "messages": USER,  # type: ignore[union-attr]
                                   "metadata": {"jarvis_max_calls": 1000, "jarvis_max_wall": "2.5",
                                                "trace_id": "theirs"}})  # fmt: skip
        assert spec.max_calls == 50 and spec.max_wall == 2.5


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[" * 10000 + b"]" * 10000, 400, "nested"),
        (
            b'{"model": "agent:nobody", "messages": [{"role": "user", "content": "x"}]}',
            404,
            "not served here",
        ),
        (
            b'{"model": "team:nobody", "messages": [{"role": "user", "content": "x"}]}',
            404,
            "not served here",
        ),
        (b'{"model": "agent:simple", "messages": []}', 400, "must not be empty"),
        (
            b'{"model": "agent:simple", "messages": [{"role": "assistant", "content": "x"}]}',
            400,
            "last message must be the user",
        ),
        (
            b'{"model": "agent:simple", "messages": [{"role": "user", "content": "x"}],'
            b' "metadata": {"jarvis_max_callz": "2"}}',
            400,
            "not a jarvis budget",
        ),
        (
            b'{"model": "agent:simple", "messages": [{"role": "user", "content": "x"}],'
            b' "metadata": {"jarvis_max_calls": "-2"}}',
            400,
            "positive int",
        ),
        (
            b'{"model": "agent:simple", "messages": [{"role": "user", "content": "x"}],'
            b' "metadata": {"jarvis_max_wall": "nan"}}',
            400,
            "positive float",
        ),
        (
            b'{"model": "agent:simple", "messages": [{"role": "user", "content": "x"}],'
            b' "max_tokens": "lots"}',
            400,
            "max_tokens must be an integer",
        ),
        (
            b'{"model": "agent:orchestrator", "messages": [{"role": "user", "content": "x"}],'
            b' "tools": [{"type": "function", "function": {"name": "rm"}}]}',
            400,
            "cannot bring tools",
        ),
    ],
)
def test_hostile_requests_get_openai_shaped_errors(
    quiet: tuple[OllamaServer, ScriptedEngine], body: bytes, status: int, says: str
) -> None:
    server, engine = quiet
    code, data = post(server, body)
    assert code == status, data
    error = json.loads(data)["error"]
    assert says in error["message"] and set(error) == {"message", "type", "param", "code"}
    assert engine.calls == []  # nothing ran


@pytest.fixture(scope="module")
def quiet() -> Iterator[tuple[OllamaServer, ScriptedEngine]]:
    engine = ScriptedEngine(fallback=answer_to_last)
    with serving(engine) as server:
        yield server, engine


def post(server: OllamaServer, body: bytes, **headers: str) -> tuple[int, bytes]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    sent = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", **headers}
    connection.request("POST", "/v1/chat/completions", body, sent)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, data


def test_callers_are_checked_before_anything_runs() -> None:
    engine = ScriptedEngine(fallback=answer_to_last)
    body = json.dumps({"model": "agent:simple", "messages": USER}).encode()
    with serving(engine) as server:
        for headers, status in [
            ({"Authorization": ""}, 401),
            ({"Authorization": "Bearer " + "t" * 23}, 401),
            ({"Authorization": f"Basic {TOKEN}"}, 401),
            ({"Host": "evil.example"}, 403),  # DNS rebinding
            ({"Origin": "https://evil.example"}, 403),  # a web page
        ]:
            code, data = post(server, body, **headers)
            assert code == status, (headers, data)
            assert json.loads(data)["error"]["code"] in (
                "authentication_error",
                "invalid_request_error",
            )
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=server.url + "/v1", api_key="wrong" * 5,
                          max_retries=0).models.list()  # fmt: skip
        code, _ = post(server, b"x" * 100, **{"Content-Length": str(64 * 1024 * 1024)})
        assert code == 413
        assert post(server, body)[0] == 200
    assert len(engine.calls) == 1


OPTIONS = SamplingOptions()


class EndlessEngine(ScriptedEngine):
    """Streams words until it is stopped: what a client that never reads is sent."""

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        model: str = "",
        tools: Sequence[ToolSpec] = (),
        options: SamplingOptions = OPTIONS,
    ) -> AsyncIterator[StreamChunk]:
        self.calls.append(None)  # type: ignore[arg-type]
        while True:
            self.produced += 1
            yield StreamChunk(delta="word " * 200)
            await __import__("asyncio").sleep(0)


def test_a_client_that_never_reads_has_its_run_cancelled_not_buffered() -> None:
    engine = EndlessEngine()
    with serving(engine) as server:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
        body = json.dumps({"model": "agent:simple", "messages": USER, "stream": True}).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip
        try:
            wait_for(lambda: engine.calls)
            # Never read: the server's unsent output reaches MAX_PENDING, the run stops.
            wait_for(lambda: server.agents.active == 0)  # type: ignore[union-attr]
            produced = engine.produced
            assert produced * 1000 < 64 * served_mod.MAX_PENDING  # bounded, not all of it
        finally:
            sock.close()


def test_a_client_that_hangs_up_cancels_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # Seen while the run is silent, not only at the next write (no keep-alive here).
    monkeypatch.setattr(served_mod, "KEEPALIVE", 600.0)
    engine = ScriptedEngine(fallback=answer_to_last, latency_s=60)
    with serving(engine) as server:
        stream = client_of(server).chat.completions.create(
            model="agent:simple", messages=USER, stream=True
        )
        wait_for(lambda: engine.calls)  # the run is waiting on the model
        stream.close()
        wait_for(lambda: server.agents.active == 0, 30)  # type: ignore[union-attr]


@pytest.mark.docker
def test_a_client_that_hangs_up_leaves_no_container(tmp_path: Path) -> None:
    """A sandboxed served agent (real Docker): the openai client closes its stream while
    the agent, in its container, waits on the model; the run is cancelled and its
    container is gone."""
    from tests.conftest import require
    from tests.sandbox.conftest import engine_problem
    from tests.sandbox.test_escape import our_containers

    problem = engine_problem()
    require(not problem, problem)
    engine = ScriptedEngine(fallback=answer_to_last, latency_s=120)
    with serving(engine, sandbox=True) as server:
        stream = client_of(server).chat.completions.create(
            model="agent:simple", messages=USER, stream=True
        )
        wait_for(lambda: engine.calls, 120)  # the agent runs in its container
        assert our_containers()
        stream.close()
        wait_for(lambda: server.agents.active == 0, 60)  # type: ignore[union-attr]
    assert not our_containers()


def test_jarvis_serve_as_the_user_runs_it(tmp_path: Path) -> None:
    """The command with its defaults: a token made once, kept 0600 in the state dir; the
    agents and the teams listed beside the model; no token, no answer."""
    teams = tmp_path / "teams"
    teams.mkdir()
    (teams / "pair.toml").write_text(TEAM)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "JARVIS_STATE_DIR": str(tmp_path / "state")}
    env.pop("JARVIS_SERVE_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jarvisd", "serve", "--port", str(port), "--teams", str(teams),
         "-m", "smollm2-135m"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        token_file = tmp_path / "state" / "serve.token"
        wait_for(lambda: token_file.exists() or proc.poll() is not None, 60)
        assert proc.poll() is None
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=token,
                               max_retries=2)  # fmt: skip
        wait_for(lambda: _answers(client), 60)
        ids = [m.id for m in client.models.list()]
        assert ids[1:] == ["agent:simple", "agent:orchestrator", "agent:react", "agent:rlm",
                           "team:pair"]  # fmt: skip
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="not-the-token",
                          max_retries=0).models.list()  # fmt: skip
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_the_token_file_is_whole_or_absent_and_one_token_wins(
    isolated_dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client waiting for ``serve.token`` to appear read it empty once (CI: the file
    was made, then written): it is put in place whole. A second first start serves the
    token that won, not one of its own."""
    import threading

    from jarvisd._paths import paths
    from jarvisd.cli._serve import server_token

    path = paths().state / "serve.token"
    writing, go_on = threading.Event(), threading.Event()
    real_fdopen = os.fdopen

    def slow_fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
        writing.set()  # the file is open, nothing written yet
        go_on.wait(30)
        return real_fdopen(fd, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", slow_fdopen)
    made: list[str] = []
    first = threading.Thread(target=lambda: made.append(server_token(None)[0]))
    first.start()
    assert writing.wait(10)
    seen = path.read_text() if path.exists() else None
    go_on.set()
    first.join(30)
    assert seen is None, f"the token file was readable before it was whole: {seen!r}"
    assert path.read_text().strip() == made[0] and path.stat().st_mode & 0o777 == 0o600
    monkeypatch.setattr(os, "fdopen", real_fdopen)
    # Another start now serves that token; one whose file lost the race adopts it too.
    assert server_token(None)[0] == made[0]
    winner = "w" * 43

    def lost(src: str, dst: str) -> None:  # another first start put its token in place
        Path(dst).write_text(winner + "\n")
        raise FileExistsError(dst)

    path.unlink()
    monkeypatch.setattr(os, "link", lost)
    assert server_token(None)[0] == winner
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".serve")] == []


def _answers(client: openai.OpenAI) -> bool:
    try:
        client.models.list()
    except openai.APIConnectionError:
        return False
    return True


def test_an_event_is_cut_to_its_bound_and_a_long_task_refused() -> None:
    from jarvisd._events import Event, EventType
    from jarvisd._messages import Role, ToolCall

    huge = Event(EventType.TOOL_CALL_END, {"tool": "shell", "content": "x" * 1_000_000})
    shown = served_mod._bounded_event(huge)
    assert len(json.dumps(shown).encode()) <= served_mod.MAX_EVENT_BYTES
    assert shown["truncated"] and shown["data"]["tool"] == "shell"
    turns = [
        Message(Role.USER, "add 2 and 2"),
        Message(Role.ASSISTANT, "", (ToolCall.from_arguments("calc", {"e": "2+2"}),)),
        Message(Role.TOOL, "4", name="calc"),
        Message(Role.USER, "and 3?"),
    ]
    assert served_mod.task_text(turns).splitlines()[1:4] == [
        "user: add 2 and 2",
        'assistant: called calc({"e": "2+2"})',
        "tool calc: 4",
    ]
    with pytest.raises(served_mod.BadRequest) as caught:
        served_mod.task_text([Message(Role.USER, "x" * (served_mod.MAX_TASK_CHARS + 1))])
    assert caught.value.status == 413


def test_runs_beyond_the_cap_are_answered_429(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(served_mod, "MAX_RUNS", 1)
    engine = ScriptedEngine(fallback=answer_to_last, latency_s=60)
    with serving(engine) as server:
        first = client_of(server).chat.completions.create(
            model="agent:simple", messages=USER, stream=True
        )
        wait_for(lambda: engine.calls)
        with pytest.raises(openai.RateLimitError):
            client_of(server).chat.completions.create(model="agent:simple", messages=USER)
        first.close()
        wait_for(lambda: server.agents.active == 0, 30)  # type: ignore[union-attr]


class SlowToStopEngine(ScriptedEngine):
    """Takes 2 s to stop when cancelled, as a run whose container is being removed."""

    async def generate(self, messages: Sequence[Message], **kw: Any) -> Any:
        import asyncio

        self.calls.append(None)  # type: ignore[arg-type]
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(2)
            raise
        return reply("never")


def test_stopping_the_server_ends_its_runs_first() -> None:
    engine = SlowToStopEngine()
    server = serving(engine).start()
    try:
        stream = client_of(server).chat.completions.create(
            model="agent:simple", messages=USER, stream=True
        )
        wait_for(lambda: engine.calls)
    finally:
        server.stop()
    assert server.agents is not None and server.agents.active == 0
    stream.close()


def test_any_request_body_is_a_spec_or_one_clear_error() -> None:
    """Generated bodies, shaped like chat requests for served agents: the answer is a
    spec, a BadRequest (400/413) or ModelNotFound (404), never another exception."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from jarvisd._errors import ModelNotFound

    agents = ServedAgents(Config(), ("orchestrator", "simple"), {"pair": TEAM}, ("calculator",))
    scalar = (
        st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats()
        | st.text(max_size=12) | st.sampled_from(["user", "system", "assistant", "tool", "1", "-1", "nan"])
    )  # fmt: skip
    keys = st.sampled_from(["role", "content", "name", "tool_calls", "jarvis_max_calls",
                            "jarvis_max_wall", "jarvis_x", "tag", "type", "text"])  # fmt: skip
    values = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(keys, inner, max_size=3), max_leaves=8)  # fmt: skip
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "tool", "x"])},
        optional={"content": values, "tool_calls": values, "name": values},
    )
    body = st.fixed_dictionaries(
        {"model": st.sampled_from(["agent:simple", "agent:orchestrator", "team:pair",
                                   "agent:nobody", "team:"]) | scalar},
        optional={"messages": st.lists(message, max_size=4) | values, "metadata": values,
                  "max_tokens": values, "temperature": values, "tools": values,
                  "stream": values},
    )  # fmt: skip

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(body)
    def check(raw: dict[str, Any]) -> None:
        try:
            agents.spec(raw)
        except (served_mod.BadRequest, ModelNotFound):
            pass

    check()
