"""The review's git attacks end to end: `jarvis code` on the CLI, the agent (CodeAct on a
scripted engine behind a real Ollama-protocol server) in the real sandbox writing what
a hostile agent writes, then `jarvis code show`, `git status` in the path it prints,
and `jarvis code apply`. Nothing runs on the host; the bytecode trick fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from jarvisd._messages import Generation, Message, Role, ToolSpec
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.testing import OllamaStandIn
from tests.conftest import require
from tests.sandbox.conftest import engine_problem

from .conftest import CALC, FIXED

pytestmark = pytest.mark.docker

#: What the hostile agent does in its workspace (WS: the path the prompt names): a
#: module the project's filter runs as `python3 -m stripper` from the workspace, the
#: attributes that arm every driver, a repository of its own in place of the
#: workspace's, and a .pyc of the fixed calc.py stamped as the unchanged one.
AGENT_CODE = f"""
import importlib.util, os, subprocess
from importlib import _bootstrap_external as b
ws = WS
open(ws + '/stripper.py', 'w').write(
    "import sys; open(MARKER, 'a').write('ran on the host')\\n")
open(ws + '/.gitattributes', 'w').write('* filter=strip diff=strip merge=strip\\n')
open(ws + '/notebook.ipynb', 'w').write('{{}}\\n')
open(ws + '/notes.txt', 'w').write('a new file\\n')
os.makedirs(ws + '/.git', exist_ok=True)
open(ws + '/.git/HEAD', 'w').write('ref: refs/heads/main\\n')
os.makedirs(ws + '/.git/objects', exist_ok=True)
os.makedirs(ws + '/.git/refs', exist_ok=True)
open(ws + '/.git/config', 'w').write(
    '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n'
    '\\tfsmonitor = "python3 -m stripper; false"\\n')
calc = ws + '/calc.py'
st = os.stat(calc)
code = compile({FIXED!r}, calc, 'exec')
cached = importlib.util.cache_from_source(calc)
os.makedirs(os.path.dirname(cached), exist_ok=True)
open(cached, 'wb').write(b._code_to_timestamp_pyc(code, st.st_mtime, st.st_size))
print('planted')
"""
TEST_COMMAND = "python3 -c 'import test_calc as t; t.test_add()'"


def hostile(marker: Path):  # type: ignore[no-untyped-def]
    def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
        if any(m.role is Role.ASSISTANT for m in messages):
            return reply("all done")
        prompt = next(m.content for m in messages if m.role is Role.USER)
        where = prompt.split("in the directory ", 1)[1].split(" ", 1)[0]
        code = AGENT_CODE.replace("WS", repr(where)).replace("MARKER", repr(str(marker)))
        return reply(f"```python\n{code}\n```")

    return answer


@pytest.fixture
def standin_url(tmp_path: Path) -> Iterator[str]:
    problem = engine_problem()
    require(not problem, problem)
    marker = tmp_path / "ran"
    with OllamaStandIn(ScriptedEngine(fallback=hostile(marker))) as standin:
        yield standin.url


def jarvis(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home)}
    env.pop("XDG_CONFIG_HOME", None)
    return subprocess.run([sys.executable, "-m", "jarvisd", *args], capture_output=True,
                          text=True, timeout=600, env=env)  # fmt: skip


@pytest.mark.parametrize("kind", ["git", "plain"])
def test_a_hostile_agent_runs_nothing_on_the_host(
    kind: str, standin_url: str, project: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    drivers = (
        '[filter "strip"]\n\tclean = python3 -m stripper\n\tsmudge = python3 -m stripper\n'
        '[diff "strip"]\n\tcommand = python3 -m stripper\n\ttextconv = python3 -m stripper\n'
        '[merge "strip"]\n\tdriver = python3 -m stripper\n'
    )
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(drivers)  # what `nbstripout --install --global` does
    if kind == "git":
        with (project / ".git" / "config").open("a") as handle:
            handle.write(drivers)
        (project / ".git" / "info").mkdir(exist_ok=True)
        (project / ".git" / "info" / "attributes").write_text("* filter=strip diff=strip\n")
    else:
        project = tmp_path / "plain"
        project.mkdir()
        (project / "calc.py").write_text(CALC)
        (project / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n"
                                              "    assert add(2, 3) == 5\n")  # fmt: skip
    config = Path(os.environ["JARVIS_CONFIG_DIR"]) / "config.toml"
    config.write_text(f'[engine]\ndefault = "ollama"\nmodel = "scripted"\n'
                      f'[engine.ollama]\nhost = "{standin_url}"\n'
                      '[sandbox]\nmemory = "256m"\n')  # fmt: skip

    done = jarvis(home, "code", str(project), "fix it", "--no-daemon", "--test", TEST_COMMAND)
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), "recording the change ran the agent's module on the host"
    (ws,) = json.loads(jarvis(home, "code", "list", "--json").stdout)
    shown = jarvis(home, "code", "show", ws["id"], "--no-pager")
    assert shown.returncode == 0, shown.stderr
    # The .pyc stood in for the unchanged source: "test after" runs the source.
    assert "test after:  failed" in shown.stdout, shown.stdout
    files = {f["path"] for f in ws["outcome"]["files"]}
    assert files == {"stripper.py", ".gitattributes", "notebook.ipynb", "notes.txt"}
    assert "+a new file" in shown.stdout
    # The path shown holds no repository of the agent's: git there runs nothing.
    assert f"workspace: {ws['path']}" in shown.stdout
    assert not os.path.lexists(Path(ws["path"]) / ".git")
    subprocess.run(["git", "status"], cwd=ws["path"], capture_output=True,
                   env={**os.environ, "GIT_CEILING_DIRECTORIES": str(Path(ws["path"]).parent)})  # fmt: skip
    applied = jarvis(home, "code", "apply", ws["id"])
    assert applied.returncode == 0, applied.stderr
    assert (project / "notes.txt").read_text() == "a new file\n"
    assert (project / "calc.py").read_text() == CALC
    assert not marker.exists(), marker.read_text()
