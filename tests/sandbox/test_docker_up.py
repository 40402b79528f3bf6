"""packaging/dev/docker-up.sh: a state directory anyone but root could change is refused
before anything is written there, and a second run reuses the running engine."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import require

SCRIPT = Path(__file__).resolve().parents[2] / "packaging" / "dev" / "docker-up.sh"


def docker_up(state: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "JARVIS_DOCKER_STATE"}
    return subprocess.run(
        ["sh", str(SCRIPT), str(state)], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.fixture
def as_root() -> None:
    require(os.geteuid() == 0, "docker-up.sh runs dockerd as root: these checks need root")


@pytest.mark.usefixtures("as_root")
def test_a_state_dir_someone_else_could_change_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    # The review's attack: a state directory another user owns, its log a link to a
    # file of root's. dockerd's log must never be written through it.
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "dockerd.log").symlink_to(victim)
    os.chown(evil, 1000, 1000)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    public = tmp_path / "public"
    public.mkdir()
    public.chmod(0o777)
    (public / "state").mkdir(mode=0o700)
    cases = {
        evil: "owned by uid 1000",
        link: "is a symlink",
        open_dir: "writable by others",
        public / "state": f"{public} is writable by others",
        public / "new": f"{public} is writable by others",
    }
    for state, reason in cases.items():
        done = docker_up(state)
        assert done.returncode != 0, (state, done.stderr)
        assert reason in done.stderr, (state, done.stderr)
        assert "DOCKER_HOST" not in done.stdout
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in evil.iterdir()) == ["dockerd.log"]
    assert not (public / "new").exists()
    assert list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.docker
@pytest.mark.usefixtures("as_root")
def test_a_second_run_reuses_the_running_engine() -> None:
    host = os.environ.get("DOCKER_HOST", "")
    socket_path = Path(host.removeprefix("unix://"))
    state = socket_path.parent
    require(
        host.startswith("unix://") and (state / "dockerd.pid").is_file(),
        f"DOCKER_HOST ({host or 'unset'}) is not an engine docker-up.sh started",
    )
    done = docker_up(state)
    assert done.returncode == 0, done.stderr
    assert "reusing the engine already running" in done.stderr
    assert done.stdout.splitlines()[-1] == f"DOCKER_HOST={host}"
    info = os.stat(socket_path)
    assert stat.S_ISSOCK(info.st_mode)
    assert info.st_mode & 0o007 == 0, oct(info.st_mode)  # never world-accessible
