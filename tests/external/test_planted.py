"""E3: a sandboxed ACP agent may not plant a command for later.

The scripted agent (scenario ``plant``) writes ``core.fsmonitor`` into ``.git/config``,
a hook, ``.envrc`` and ``.vscode/tasks.json`` through ``fs/write_text_file`` and
straight from its own process, reads a root-only file and writes into a root-owned
directory through fs requests, then goes on to write ``ok.txt``. Through the run
contract and the real sandbox: each plant is refused with one clear error, the fs
requests get the agent's own permissions, and the agent finishes its turn."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from jarvisd._errors import ToolError
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine
from jarvisd.external._workspace import Workspace
from jarvisd.runs import AgentSpec, run_spec
from jarvisd.sandbox._policy import SANDBOX_GID, SANDBOX_UID
from tests.conftest import require

from .test_agent import _config
from .test_sandboxed import IMAGE, _docker_ok

AS_ROOT = os.geteuid() == 0
PLANTED = "fsmonitor"


def _project(workspace: Path) -> None:
    """A git project the agent's own uid could write everywhere (so only the read-only
    .git mount stops a direct write), with a root-only file and a root-owned directory."""
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    for dirpath, dirnames, filenames in os.walk(workspace / ".git"):
        for name in [*dirnames, *filenames]:
            os.chmod(os.path.join(dirpath, name), 0o777)
    os.chmod(workspace / ".git", 0o777)
    os.chmod(workspace, 0o777)
    (workspace / "private.txt").write_text("root only\n")
    os.chmod(workspace / "private.txt", 0o600)
    (workspace / "locked").mkdir(mode=0o755)


def test_a_sandboxed_agent_cannot_plant_a_command_through_fs_requests(workspace: Path) -> None:
    require(_docker_ok(), "needs a container engine (DOCKER_HOST)")
    _project(workspace)
    config = _config("plant", workspace, python="python3", image=IMAGE)
    spec = AgentSpec(input="go", agent="fake", options={"workspace": str(workspace)})
    run = RunContext()
    outcome = asyncio.run(
        run_spec(spec, run, config, ScriptedEngine.from_replies(["unused"]), trace=False)
    )
    assert outcome.ok, outcome.failure  # the agent went on and ended its turn
    got = json.loads(outcome.answer)
    for rel in (".git/config", ".git/hooks/pre-commit", ".envrc", ".vscode/tasks.json",
                ".GIT/config"):  # fmt: skip
        assert got[f"fs {rel}"] != "written", f"{rel} was written through fs/write_text_file"
        error = json.loads(got[f"fs {rel}"])  # one JSON-RPC error, saying why
        assert "configures tools that run commands" in error["data"]["details"], rel
    assert got["direct .git/config"] == "error 30"  # EROFS: .git is mounted read-only
    assert got["direct .git/hooks/pre-commit"] == "error 30"
    assert got["fs ok.txt"] == "written"
    assert PLANTED not in (workspace / ".git" / "config").read_text()
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert not (workspace / ".envrc").exists()
    if AS_ROOT:  # the agent's permissions, not jarvis's
        assert got["fs private.txt"] == "error"
        assert got["fs locked/x"] == "error"
        assert not (workspace / "locked" / "x").exists()
        assert (workspace / "ok.txt").stat().st_uid == SANDBOX_UID


@pytest.mark.parametrize(
    "rel",
    [".git/config", ".git/hooks/post-checkout", "sub/.git", "vendor/x/.git/config",
     ".gitmodules", "src/.gitattributes", ".envrc", ".vscode/tasks.json", ".idea/workspace.xml",
     ".pre-commit-config.yaml", ".hg/hgrc", ".Git/config", ".VSCODE/settings.json"],
)  # fmt: skip
def test_tool_configuring_paths_are_refused(workspace: Path, rel: str) -> None:
    with pytest.raises(ToolError, match="configures tools that run commands"):
        Workspace(workspace).write_text(str(workspace / rel), "x")
    assert not (workspace / rel).exists()


def test_ordinary_dotfiles_stay_writable(workspace: Path) -> None:
    ws = Workspace(workspace)
    for rel in (".gitignore", "src/git/config.py", ".github/workflows/ci.yml", "Makefile"):
        ws.write_text(rel, "x\n")
        assert ws.read_text(rel) == "x\n"


@pytest.mark.skipif(not AS_ROOT, reason="jarvis runs as the agent's own user: nothing to drop")
def test_fs_requests_get_the_agent_users_permissions(tmp_path: Path) -> None:
    # The root sits in a directory only root may traverse: the agent reaches its
    # workspace through the container's bind mount, the request through a descriptor.
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    root = hidden / "ws"
    root.mkdir()
    os.chmod(root, 0o777)
    (root / "README.md").write_text("hello\n")
    (root / "private.txt").write_text("root only\n")
    os.chmod(root / "private.txt", 0o600)
    (root / "locked").mkdir(mode=0o755)
    ws = Workspace(root, user=(SANDBOX_UID, SANDBOX_GID))
    assert ws.read_text("README.md") == "hello\n"
    with pytest.raises(ToolError, match="Permission denied"):
        ws.read_text("private.txt")
    with pytest.raises(ToolError, match="Permission denied"):
        ws.write_text("locked/x", "x")
    ws.write_text("new/file.txt", "mine\n")
    assert (root / "new" / "file.txt").stat().st_uid == SANDBOX_UID
    assert (root / "new").stat().st_uid == SANDBOX_UID
    with pytest.raises(ToolError, match="larger than"):
        Workspace(root, user=(SANDBOX_UID, SANDBOX_GID), max_read_bytes=3).read_text("README.md")


@pytest.mark.skipif(not AS_ROOT, reason="only root's private workspace is worked on as a copy")
def test_in_a_private_workspace_fs_requests_change_the_copy_and_plants_stay_out(
    tmp_path: Path,
) -> None:
    """jarvis as root in a 0700 project: the agent works on a copy it owns. Its fs
    requests go to that copy too (as its own tools do), so a write it may make lands in
    the project when the run ends, and a tool-configuring path is refused all the
    same: the write-back never carries one."""
    require(_docker_ok(), "needs a container engine (DOCKER_HOST)")
    workspace = tmp_path / "private"
    workspace.mkdir(mode=0o700)
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "private.txt").write_text("root only\n")
    (workspace / "locked").mkdir(mode=0o755)
    before = (workspace / ".git" / "config").read_text()
    config = _config("plant", workspace, python="python3", image=IMAGE)
    spec = AgentSpec(input="go", agent="fake", options={"workspace": str(workspace)})
    outcome = asyncio.run(
        run_spec(spec, RunContext(), config, ScriptedEngine.from_replies(["unused"]), trace=False)
    )
    assert outcome.ok, outcome.failure
    got = json.loads(outcome.answer)
    assert got["fs ok.txt"] == "written"
    assert (workspace / "ok.txt").is_file()  # written back from the copy
    for rel in (".git/config", ".git/hooks/pre-commit", ".envrc", ".vscode/tasks.json"):
        assert got[f"fs {rel}"] != "written", rel
    assert (workspace / ".git" / "config").read_text() == before
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert not (workspace / ".envrc").exists() and not (workspace / ".vscode").exists()
    assert os.stat(workspace).st_mode & 0o777 == 0o700  # left as it was
