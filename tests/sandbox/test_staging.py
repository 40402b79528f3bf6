"""Mount staging (root only): the engine-facing path is a bind of exactly what was
checked, which a later swap of the checked path does not change; it is gone after
the block, and stages left by a dead process are swept."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from jarvisd._errors import MountRefused
from jarvisd.sandbox import MountPolicy, _staging
from jarvisd.sandbox._mounts import pin
from tests.conftest import require


@pytest.fixture
def as_root() -> None:
    require(os.geteuid() == 0, "staging mounts needs root")


def mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as info:
        return any(line.split()[4] == str(path) for line in info)


@pytest.mark.usefixtures("as_root")
def test_a_staged_mount_is_the_checked_directory_whatever_the_path_becomes(
    tmp_path: Path,
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "x").mkdir(parents=True)
    (root / "x" / "mine.txt").write_text("checked")
    (root / "f.txt").write_text("a file")
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET")
    policy = MountPolicy([str(root)])
    mounts = [policy.check(str(root / "x")), policy.check(str(root / "f.txt"))]
    with _staging.staged(mounts) as sources:
        staged_dir, staged_file = map(Path, sources)
        assert staged_dir.parent.stat().st_mode & 0o077 == 0  # root's alone
        # The path is swapped after staging: what the engine would be given is not.
        (root / "x").rename(root / "x.away")
        (root / "x").symlink_to(outside)
        assert sorted(os.listdir(staged_dir)) == ["mine.txt"]
        assert staged_file.read_text() == "a file"
    assert not mounted(staged_dir) and not staged_dir.parent.exists()
    # Staging again now: the path leads elsewhere, so it is refused.
    with pytest.raises(MountRefused, match="now a symlink"), _staging.staged(mounts[:1]):
        pass


@pytest.mark.usefixtures("as_root")
def test_stages_of_dead_processes_are_swept(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    mount = MountPolicy([str(tmp_path)]).check(str(tmp_path / "data"))
    stale = Path(tempfile.mkdtemp(prefix="jarvis-mnt-999999999-"))
    fd = pin(mount)
    try:
        (stale / "0").mkdir()
        _staging._bind(fd, stale / "0")
    finally:
        os.close(fd)
    assert mounted(stale / "0")
    live = Path(tempfile.mkdtemp(prefix=f"jarvis-mnt-{os.getpid()}-"))
    try:
        _staging.sweep_stale_stages.cache_clear()
        _staging.sweep_stale_stages()
        assert not stale.exists() and live.exists()
    finally:
        live.rmdir()
