"""Which directories a container covers so the sandbox user reaches a mount below a
private one (``jarvisd.sandbox._covers``); the mounts themselves are tested through
the CLI as root (tests/external/test_as_a_user.py)."""

from __future__ import annotations

import os
from pathlib import Path

from jarvisd.sandbox._covers import covers, unreachable


def test_the_topmost_private_ancestor_is_covered(tmp_path: Path) -> None:
    top = tmp_path / "private"
    (top / "a" / "b").mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(top, 0o700)
    os.chmod(top / "a", 0o700)
    other = os.getuid() + 1
    # The topmost directory on the way that another user cannot pass (the test's own
    # temporary root may be private already: then that one).
    first = next(
        str(d) for d in reversed((top / "a" / "b").parents)
        if d != Path("/") and not os.stat(d).st_mode & 0o001
    )  # fmt: skip
    assert covers([str(top / "a" / "b")], other, other) == [first]
    assert covers([str(top / "a" / "b")], other, other, [first]) == []  # the container's own
    assert covers([str(top / "a" / "b")], os.getuid(), os.getgid()) == []  # the owner
    assert unreachable(top, other, other).startswith(f"{top} is private (mode 0700")
    assert unreachable(tmp_path, other, other) == ""
