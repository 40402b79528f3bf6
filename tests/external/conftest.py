from __future__ import annotations

import asyncio
import functools
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from jarvisd._events import Event
from jarvisd._runcontext import RunContext
from jarvisd.executors import Channel
from jarvisd.external import AcpClient, PermissionPolicy, Workspace
from jarvisd.external._host import start_on_host

MARKER = "MARKER-7f3a"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "README.md").write_text(f"{MARKER}\nsecond line\n")
    return root


async def fake_agent(scenario: str, workspace: Path, home: Path) -> Channel:
    """The scripted ACP agent (jarvisd.testing.acp_agent) started as a host process."""
    os.makedirs(home, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", os.defpath), "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "jarvisd.testing.acp_agent", scenario]
    return await start_on_host(argv, env, cwd=workspace, home=home)


def make_client(
    workspace: Path,
    *,
    permissions: dict[str, str] | None = None,
    approver: Callable[..., object] | None = None,
) -> tuple[AcpClient, RunContext, list[Event], list[str]]:
    deltas: list[str] = []
    events: list[Event] = []
    run = RunContext(on_delta=deltas.append)
    run.bus.subscribe(events.append)
    policy = PermissionPolicy.from_mapping(permissions or {})
    client = AcpClient(
        run, Workspace(workspace), agent="fake", policy=policy,
        approver=approver,  # type: ignore[arg-type]
    )  # fmt: skip
    return client, run, events, deltas


def of_type(events: Sequence[Event], name: str) -> list[Event]:
    return [e for e in events if e.type.value == name]


def sync(test: Callable[..., Any]) -> Callable[..., None]:
    """Run an async test body with asyncio.run (the suite has no asyncio plugin)."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return wrapper
