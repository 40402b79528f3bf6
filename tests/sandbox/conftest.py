"""Fixtures for the real-engine sandbox tests: a DockerExecutor on the engine named by
DOCKER_HOST (CI starts one with packaging/dev/docker-up.sh and builds the image)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jarvisd._config import Config, SandboxConfig
from tests.conftest import require


@functools.cache
def engine_problem() -> str:
    """Why the real-engine tests cannot run here ("" when they can)."""
    from jarvisd._errors import SandboxError
    from jarvisd.sandbox import connect
    from jarvisd.sandbox._image import image_present

    try:
        client = connect(Config(), timeout=10)
    except SandboxError as exc:
        return (
            f"no container engine reachable ({exc}); run packaging/dev/docker-up.sh and "
            "export the DOCKER_HOST it prints"
        )
    image = SandboxConfig().image
    try:
        if not image_present(client, image):
            return f"sandbox image {image} missing: run `jarvis sandbox build`"
    finally:
        client.close()
    return ""


@pytest.fixture
def engine() -> None:
    problem = engine_problem()
    require(not problem, problem)


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    ro = tmp_path / "ro"
    rw = tmp_path / "rw"
    ro.mkdir()
    rw.mkdir()
    rw.chmod(0o777)  # the sandbox user (10001 when tests run as root) must write there
    return ro, rw


def sandbox_config(roots: tuple[Path, Path], **overrides: object) -> Config:
    ro, rw = roots
    values: dict[str, object] = {"allowed_roots": (str(ro), f"{rw}:rw"), "memory": "128m"}
    values.update(overrides)
    return Config(sandbox=SandboxConfig(**values))  # type: ignore[arg-type]


@pytest.fixture
def hostile(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Install ``HEAD + body`` (tests/sandbox/test_hostile_program.py) as the program
    SandboxedAgent starts: a hostile runner in the agent's container."""
    import textwrap

    from jarvisd.runs import _sandboxed as _agent

    from .test_escape import our_containers
    from .test_hostile_program import HEAD

    def install(body: str) -> None:
        program = HEAD + textwrap.dedent(body)
        monkeypatch.setattr(_agent, "RUNNER_ARGV", ("python3", "-S", "-B", "-c", program))

    yield install
    assert not our_containers()
