"""The CLI as a user runs it: a real `jarvis` process, real exit codes, one-line errors."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jarvisd.engines import ScriptedEngine, reply
from jarvisd.testing import OllamaStandIn

JARVIS = [sys.executable, "-m", "jarvisd"]


def jarvis(
    *args: str, input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*JARVIS, *args],
        capture_output=True,
        text=True,
        input=input,
        timeout=timeout,
        env=os.environ.copy(),
    )


def use_ollama(url: str) -> None:
    config_dir = Path(os.environ["JARVIS_CONFIG_DIR"])
    (config_dir / "config.toml").write_text(
        f'[engine]\ndefault = "ollama"\n[engine.ollama]\nhost = "{url}"\n'
    )


def test_help_lists_commands() -> None:
    out = jarvis("--help")
    assert out.returncode == 0
    for command in ("ask", "config", "models", "serve-model"):
        assert command in out.stdout


def test_ask_engine_ollama_unreachable_exits_3_with_one_line() -> None:
    config_dir = Path(os.environ["JARVIS_CONFIG_DIR"])
    (config_dir / "config.toml").write_text('[engine.ollama]\nhost = "http://127.0.0.1:9"\n')
    out = jarvis("ask", "--engine", "ollama", "hello")
    assert out.returncode == 3
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "cannot reach Ollama" in lines[0] and "Traceback" not in out.stderr


def test_ask_streams_through_ollama_engine() -> None:
    with OllamaStandIn(ScriptedEngine([reply("Red, yellow and blue.")])) as standin:
        use_ollama(standin.url)
        out = jarvis("ask", "Name three primary colors.")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "Red, yellow and blue.\n"


def test_ask_json_and_stdin_question() -> None:
    with OllamaStandIn(ScriptedEngine([reply("42")])) as standin:
        use_ollama(standin.url)
        out = jarvis("ask", "--json", "-", input="What is six times seven?\n")
        asked = next(b for _, p, b in standin.requests if p == "/api/chat")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["answer"] == "42" and data["engine"] == "ollama" and data["turns"] == 1
    assert data["usage"]["completion_tokens"] >= 1
    assert asked["messages"][-1]["content"] == "What is six times seven?"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("ask", ""), "the question is empty"),
        (("ask", "--agent", "wizard", "hi"), "unknown agent 'wizard'"),
        (("ask", "--mount", "/tmp", "hi"), "--mount only applies with --sandbox"),
        (("ask", "--engine", "nonsense", "hi"), "unknown engine 'nonsense'"),
        (("models", "pull", "gpt-9"), "no model 'gpt-9' in the catalog"),
    ],
)
def test_usage_errors_exit_2(args: tuple[str, ...], message: str) -> None:
    with OllamaStandIn(ScriptedEngine([reply("x")])) as standin:
        use_ollama(standin.url)
        out = jarvis(*args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert message in out.stderr and "Traceback" not in out.stderr


def test_bad_config_is_one_clear_line() -> None:
    path = Path(os.environ["JARVIS_CONFIG_DIR"]) / "config.toml"
    path.write_text("[agent]\nmax_tokens = 'lots'\n")
    out = jarvis("config", "show")
    assert out.returncode == 1
    assert (
        out.stderr.strip()
        == f"jarvis: error: {path}: agent.max_tokens: expected an integer, got 'lots'"
    )


def test_config_show_and_path() -> None:
    out = jarvis("config", "path", "--json")
    data = json.loads(out.stdout)
    assert data["config"] == os.environ["JARVIS_CONFIG_DIR"]
    assert data["socket"].startswith(os.environ["JARVIS_RUNTIME_DIR"])
    shown = json.loads(jarvis("config", "show", "--json").stdout)
    assert shown["config"]["engine"]["llamacpp"]["model"] == ""  # the strongest present


def test_corrupted_model_file_is_refused_with_path_and_hash() -> None:
    from jarvisd.catalog import get_entry, model_file

    entry = get_entry("smollm2-135m")
    path = model_file(entry)
    path.parent.mkdir(parents=True)
    # Right size, wrong bytes: only the hash can tell.
    with path.open("wb") as fh:
        fh.write(b"GGUF")
        fh.truncate(entry.size)
    out = jarvis("ask", "--engine", "llamacpp", "hello")
    assert out.returncode == 3, out.stderr
    assert str(path) in out.stderr and entry.sha256 in out.stderr
    # A truncated (partial) file is refused too, before any hashing.
    with path.open("r+b") as fh:
        fh.truncate(1000)
    out = jarvis("ask", "--engine", "llamacpp", "hello")
    assert out.returncode == 3 and str(path) in out.stderr and entry.sha256 in out.stderr


def test_models_list_json_states_provenance() -> None:
    data = json.loads(jarvis("models", "list", "--json").stdout)
    names = {m["name"]: m for m in data}
    assert set(names) == {"smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    assert names["smollm2-135m"]["default"] and names["smollm2-135m"]["license"] == "Apache-2.0"
    assert "no license" in names["qwen2.5-coder-0.5b"]["provenance"]
    assert not any(m["present"] for m in data)  # isolated data dir


def test_serve_model_on_a_busy_port_is_one_line() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = jarvis("serve-model", "--port", str(port))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"jarvis: error: cannot listen on 127.0.0.1:{port}: Address already in use"
        " (is another server there? pick another port)"
    ]


@pytest.mark.parametrize("agent", ["simple", "orchestrator"])
def test_ask_json_reports_the_model_an_openai_server_used(agent: str) -> None:
    config = Path(os.environ["JARVIS_CONFIG_DIR"]) / "config.toml"
    with OllamaStandIn(ScriptedEngine([reply("42")])) as standin:
        config.write_text(f'[engine.openai]\nbase_url = "{standin.url}/v1"\n')
        out = jarvis("ask", "--engine", "openai", "--agent", agent, "--json", "6*7?")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["answer"] == "42" and data["engine"] == "openai"
    assert data["model"] == "scripted"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("typed", "allowed"), [("y\n", True), ("\n", False), ("", False)])
def test_terminal_approver_asks_on_stderr(
    monkeypatch: pytest.MonkeyPatch, typed: str, allowed: bool
) -> None:
    from jarvisd.cli._ask import terminal_approver
    from jarvisd.external import PermissionRequest

    err = _Tty()
    monkeypatch.setattr(sys, "stdin", _Tty(typed))
    monkeypatch.setattr(sys, "stderr", err)
    approve = terminal_approver()
    assert approve is not None
    assert asyncio.run(approve(PermissionRequest("write out.txt", "edit"))) is allowed
    assert "allow write out.txt (kind edit)? [y/N]" in err.getvalue()


def test_no_terminal_no_approver(monkeypatch: pytest.MonkeyPatch) -> None:
    from jarvisd.cli._ask import terminal_approver

    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    assert terminal_approver() is None


@pytest.mark.parametrize(("typed", "allowed"), [(b"y\n", True), (b"n\n", False)])
def test_ask_on_a_terminal_answers_the_agents_permission_request(
    tmp_path: Path, typed: bytes, allowed: bool
) -> None:
    """`jarvis ask --no-daemon` under a pseudo-terminal: the scripted ACP agent asks to
    edit (kind "ask" in config), the y/N answer decides whether it writes."""
    import pty

    workspace, config_dir = tmp_path / "ws", tmp_path / "cfg"
    workspace.mkdir()
    config_dir.mkdir()
    (workspace / "README.md").write_text("MARKER-1\n")
    agent = json.dumps([sys.executable, "-m", "jarvisd.testing.acp_agent", "work"])
    (config_dir / "config.toml").write_text(
        f'[agents.permissions]\nedit = "ask"\n[agents.external.work]\ncommand = {agent}\n'
    )
    jarvis = str(Path(sys.executable).parent / "jarvis")
    argv = [jarvis, "ask", "--no-daemon", "--agent", "work", "--no-sandbox",
            "--option", f"workspace={workspace}", "go"]  # fmt: skip
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.environ["JARVIS_CONFIG_DIR"] = str(config_dir)
        os.execv(jarvis, argv)
    out, answered = b"", False
    try:
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
            if not answered and b"[y/N]" in out:
                os.write(fd, typed)
                answered = True
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    text = out.decode(errors="replace")
    assert "allow write out.txt (kind edit)? [y/N]" in text, text
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert ("edit: allowed" if allowed else "edit: denied") in text, text
    assert (workspace / "out.txt").exists() is allowed
