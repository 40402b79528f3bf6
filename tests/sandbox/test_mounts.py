"""Mount policy over tricky paths, including every one OpenJarvis accepted."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from jarvisd._errors import MountRefused
from jarvisd.sandbox import MountPolicy, parse_mount_request


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY")
    monkeypatch.setenv("HOME", str(home))
    ro = tmp_path / "ro"
    rw = tmp_path / "rw"
    for d in (ro / "proj" / "src", rw / "out", tmp_path / "outside"):
        d.mkdir(parents=True)
    (ro / "proj" / "README.md").write_text("hello")
    for name in ("tokens", "id_rsa_backup", "my.env.d", ".env", ".env.local", "prod.env",
                 "server.pem", "x.key", "credentials.json", "client_secret.json", "Secrets",
                 "ID_RSA.pub", ".aws", "access_token.txt", "site.p12"):  # fmt: skip
        (ro / name).mkdir() if "." not in name or name.startswith(".") else (ro / name).touch()
    (ro / "a:b").mkdir()
    (ro / "a,b").mkdir()
    (ro / "nl\nname").mkdir()
    nested = ro / "nested" / "deep" / "sub"
    (nested / ".ssh").mkdir(parents=True)
    (ro / "gc" / "x" / ".config" / "gcloud").mkdir(parents=True)
    (ro / "link_to_ssh").symlink_to(home / ".ssh")
    (ro / "link_to_key").symlink_to(home / ".ssh" / "id_rsa")
    (ro / "link_outside").symlink_to(tmp_path / "outside")
    (ro / "alias").symlink_to(ro / "proj")
    return tmp_path


def policy(tree: Path, **kw: object) -> MountPolicy:
    return MountPolicy([str(tree / "ro"), f"{tree / 'rw'}:rw", str(tree / "home")], **kw)  # type: ignore[arg-type]


REFUSED = [
    # (request relative to tmp_path unless absolute, expected words in the reason)
    ("/", "/ is refused"),
    ("/home", "/home"),  # the reason depends on the machine: see the test below
    ("home", "home directory"),
    ("ro/tokens", "token*"),
    ("ro/id_rsa_backup", "id_rsa*"),
    ("ro/my.env.d", "*.env.*"),
    ("ro/.env", ".env*"),
    ("ro/.env.local", ".env*"),
    ("ro/prod.env", "*.env"),
    ("ro/server.pem", "*.pem"),
    ("ro/x.key", "*.key"),
    ("ro/credentials.json", "*credential*"),
    ("ro/client_secret.json", "*secret*"),
    ("ro/Secrets", "*secret*"),
    ("ro/ID_RSA.pub", "id_rsa*"),
    ("ro/.aws", ".aws"),
    ("ro/access_token.txt", "*_token*"),
    ("ro/site.p12", "*.p12"),
    ("ro/a:b", "':'"),
    ("ro/a,b", "','"),
    ("ro/nl\nname", "control character"),
    ("ro/missing", "does not exist"),
    ("ro/link_to_ssh", ".ssh"),
    ("ro/link_to_key", ".ssh"),
    ("ro/link_outside", "outside the allowed roots"),
    ("ro/nested", "contains"),
    ("ro/gc", ".config/gcloud"),
    ("outside", "outside the allowed roots"),
    ("ro/proj:rw", "read-only"),
    ("ro/../outside", "outside the allowed roots"),
    ("home/.ssh", ".ssh"),
    ("/etc", "host state"),
    ("/proc/self", "host state"),
    ("/run", "host state"),
    ("/dev/null", "neither a regular file"),
    ("/usr/share", "outside the allowed roots"),
    ("", "empty"),
    (":rw", "names no path"),
]


@pytest.mark.parametrize(("request_text", "reason"), REFUSED)
def test_refused(tree: Path, request_text: str, reason: str) -> None:
    if request_text and not request_text.startswith(("/", ":")):
        request_text = str(tree / request_text)
    with pytest.raises(MountRefused) as info:
        policy(tree).check(request_text)
    assert reason in str(info.value)


def test_root_and_home_refused_even_when_allowed(tree: Path) -> None:
    everything = MountPolicy(["/:rw", "/home:rw", str(tree / "home")])
    for path in ("/", "/home", str(tree / "home"), os.path.expanduser("~")):
        with pytest.raises(MountRefused):
            everything.check(path)


def test_socket_in_tree_refused(tree: Path) -> None:
    target = tree / "ro" / "proj" / "sockdir"
    target.mkdir()
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(target / "docker.sock"))
        with pytest.raises(MountRefused, match=r"\*\.sock"):
            policy(tree).check(str(target))
    finally:
        sock.close()


def test_tree_too_large_refused(tree: Path) -> None:
    big = tree / "ro" / "big"
    big.mkdir()
    for i in range(30):
        (big / f"f{i}").touch()
    with pytest.raises(MountRefused, match="too large"):
        policy(tree, max_scan_entries=20).check(str(big))


def test_no_allowed_roots_refuses_everything(tree: Path) -> None:
    with pytest.raises(MountRefused, match=r"no sandbox\.allowed_roots"):
        MountPolicy([]).check(str(tree / "ro" / "proj"))


def test_accepted(tree: Path) -> None:
    p = policy(tree)
    mount = p.check(str(tree / "ro" / "proj"))
    assert mount.read_only and mount.source == (tree / "ro" / "proj").resolve()
    assert mount.target == str(mount.source)
    rw = p.check(f"{tree / 'rw' / 'out'}:rw")
    assert not rw.read_only
    assert p.check(str(tree / "rw" / "out")).read_only  # rw only when asked
    assert p.check(str(tree / "ro" / "proj" / "README.md")).read_only
    alias = p.check(str(tree / "ro" / "alias"))
    assert alias.source == (tree / "ro" / "proj").resolve()  # symlink resolved
    # Inside the home directory is fine when allowed; the home itself is not.
    project = tree / "home" / "code"
    project.mkdir()
    assert p.check(str(project)).source == project.resolve()


def test_most_specific_root_decides(tree: Path) -> None:
    p = MountPolicy([f"{tree / 'ro'}:rw", str(tree / "ro" / "proj")])
    with pytest.raises(MountRefused, match="read-only"):
        p.check(f"{tree / 'ro' / 'proj' / 'src'}:rw")


def test_duplicates_refused(tree: Path) -> None:
    with pytest.raises(MountRefused, match="more than once"):
        policy(tree).check_all([str(tree / "ro" / "proj"), str(tree / "ro" / "alias")])


def test_parse_mount_request() -> None:
    assert parse_mount_request("/data") == ("/data", False)
    assert parse_mount_request("/data:rw") == ("/data", True)
    assert parse_mount_request("/data:ro") == ("/data", False)
    with pytest.raises(MountRefused):
        parse_mount_request("/data:rw:rw")
    with pytest.raises(MountRefused):
        parse_mount_request("/da\x00ta")
