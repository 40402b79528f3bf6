"""External agents as a new user meets them (issue 30): the `jarvis` CLI, as root,
with jarvis's default directories under a home directory that is private (0700, as
/root is), in a 0700 project directory inside it, the sandbox on by default. The model
is a scripted engine behind an Ollama stand-in: opencode reads README.md with its own
tool and answers with what it read."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from jarvisd._messages import Generation, Message, ToolSpec
from jarvisd._paths import ENV_VARS
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.testing import OllamaStandIn
from tests.conftest import require

from .test_real_agents import _ready, real_agents_dir  # noqa: F401 - fixture
from .test_sandboxed import IMAGE

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("real_agents_dir")]

MARKER = "amber-heron-31"
AGENTS_DIR = os.environ.get("JARVIS_TEST_AGENTS_DIR") or os.path.expanduser(
    "~/.cache/jarvis/agents"
)


class User:
    """A home directory under the real one (0700, inside /root), jarvis's default
    directories in it, a config naming the stand-in engine and the sandbox image."""

    def __init__(
        self, home: Path, engine_url: str = "", *, project_mode: int = 0o700, more: str = ""
    ) -> None:
        self.home = home
        self.project = home / "project"
        self.project.mkdir()
        os.chmod(self.project, project_mode)
        (self.project / "README.md").write_text(f"{MARKER}\nA tiny demo project.\n")
        (self.project / "main.py").write_text('print("hello")\n')
        config = home / ".config/jarvis/config.toml"
        config.parent.mkdir(parents=True)
        engine = (
            f'[engine]\ndefault = "ollama"\n[engine.ollama]\nhost = "{engine_url}"\n'
            if engine_url
            else ""  # the embedded default
        )
        config.write_text(
            f'{engine}[sandbox]\nimage = "{IMAGE}"\nallowed_roots = ["{home}:rw"]\n{more}'
        )
        self.env = {k: v for k, v in os.environ.items() if k not in ENV_VARS.values()}
        self.env |= {"HOME": str(home), "JARVIS_AGENTS_DIR": AGENTS_DIR}
        self.env.pop("XDG_RUNTIME_DIR", None)

    def jarvis(
        self, *args: str, cwd: Path | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jarvisd", *args], capture_output=True, text=True,
            cwd=cwd or self.project, env=self.env, timeout=timeout,
        )  # fmt: skip

    def traces(self) -> list[dict[str, object]]:
        listed = self.jarvis("trace", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        return list(json.loads(listed.stdout))


def _opencode_script(path: str) -> ScriptedEngine:
    """Title calls (no tools) get a title; the first turn with tools reads ``path``
    with opencode's read tool; once its result is back, the answer quotes it."""

    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if not tools:
            return reply("Reading the marker")
        if messages[-1].role == "tool":
            return reply(f"The marker is {messages[-1].content.strip()[:400]}")
        return reply("", ("read", {"filePath": path}))

    return ScriptedEngine(fallback=answer)


@pytest.fixture
def home() -> Iterator[Path]:
    """A private home under the real one (mkdtemp: 0700; /root is 0700 too)."""
    require(os.geteuid() == 0, "the case of the issue: jarvis run as root")
    _ready("opencode")
    path = Path(tempfile.mkdtemp(prefix="jv-home-", dir=os.path.expanduser("~")))
    assert os.stat(path).st_mode & 0o777 == 0o700
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def scripted_user(home: Path, read: str, more: str = "") -> Iterator[User]:
    """The user of ``home``, whose engine makes opencode read ``read``."""
    with OllamaStandIn(_opencode_script(read)) as standin:
        yield User(home, standin.url, more=more)


def _ok(out: subprocess.CompletedProcess[str]) -> None:
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr


def test_code_with_opencode_in_a_private_home(home: Path) -> None:
    """Item 1: `jarvis code --agent opencode` on the default state directory (under a
    0700 home): the agent reaches its tree; item 3: the run is in `trace list`, ok,
    with its agent and input."""
    with scripted_user(home, "README.md") as me:
        out = me.jarvis("code", "run", "--no-daemon", "--agent", "opencode", str(me.project),
                        "What is the marker in README.md?")  # fmt: skip
        _ok(out)
        assert "cannot be inspected" not in out.stderr, out.stderr
        (trace,) = me.traces()
        assert trace["agent"] == "opencode" and trace["error"] == "", trace
        assert "What is the marker in README.md?" in str(trace["input"])
        assert MARKER in str(trace["content"])


def test_ask_opencode_in_a_private_project_with_a_mount(home: Path) -> None:
    """Items 1, 3 and 5: `jarvis ask --agent opencode` in a 0700 project (the agent
    works on a copy it may enter), with `--mount` of a directory in the private home
    (no --sandbox: the agent is sandboxed anyway); it reads the mounted file, and the run
    is in `trace list`, ok, with its agent and input."""
    data = home / "data"  # readable by all, but inside the private home (covered)
    data.mkdir()
    os.chmod(data, 0o755)
    (data / "notes.txt").write_text("slate-finch-77\n")
    os.chmod(data / "notes.txt", 0o644)
    # Outside its workspace: opencode asks first (kind "other"), and this user allows it.
    allow = '[agents.permissions]\nother = "allow"\n'
    with scripted_user(home, str(data / "notes.txt"), allow) as me:
        question = "What do the notes say?"
        out = me.jarvis("ask", "--no-daemon", "--agent", "opencode", "--mount", str(data),
                        question)  # fmt: skip
        _ok(out)
        assert "slate-finch-77" in out.stdout
        (trace,) = me.traces()
        assert trace["agent"] == "opencode" and trace["error"] == "", trace
        assert trace["input"] == question
        assert os.stat(me.project).st_mode & 0o777 == 0o700  # left as it was
