"""Mount policy over tricky paths, including every one OpenJarvis accepted."""

from __future__ import annotations

import os
import re
import socket
import stat
from pathlib import Path

import pytest

from jarvisd._errors import MountRefused
from jarvisd.sandbox import Mount, MountPolicy, parse_mount_request
from jarvisd.sandbox._mounts import MAX_SCAN_DEPTH, pin


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


def test_special_files_refused_whatever_their_name(tree: Path) -> None:
    # A socket named like any file: a root process listening on it would be reachable.
    target = tree / "ro" / "proj" / "run"
    target.mkdir()
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(target / "agent.42"))
        with pytest.raises(MountRefused, match=r"the socket .*agent\.42"):
            policy(tree).check(str(tree / "ro" / "proj"))
    finally:
        sock.close()
        (target / "agent.42").unlink()
    os.mkfifo(target / "pipe")
    with pytest.raises(MountRefused, match=r"the FIFO .*pipe"):
        policy(tree).check(str(target))
    (target / "pipe").unlink()
    if os.geteuid() == 0:  # only root may create device nodes
        os.mknod(target / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        with pytest.raises(MountRefused, match=r"the character device .*null"):
            policy(tree).check(str(target))
        (target / "null").unlink()
    assert policy(tree).check(str(target)).source == target


def test_tree_too_deep_refused(tree: Path) -> None:
    deep = tree / "ro" / "deep"
    (deep / "/".join(["d"] * (MAX_SCAN_DEPTH + 1))).mkdir(parents=True)
    with pytest.raises(MountRefused, match="too deep"):
        policy(tree).check(str(deep))
    shallow = tree / "ro" / "shallow"
    (shallow / "/".join(["d"] * (MAX_SCAN_DEPTH - 1))).mkdir(parents=True)
    assert policy(tree).check(str(shallow)).source == shallow


def test_a_mount_records_what_was_checked_and_pins_only_that(tree: Path) -> None:
    proj = tree / "ro" / "proj"
    mount = policy(tree).check(str(proj))
    info = os.stat(proj)
    assert mount.identity == (info.st_dev, info.st_ino)
    fd = pin(mount)
    try:
        assert os.path.samestat(os.fstat(fd), info)
    finally:
        os.close(fd)
    # Swapped for a link to a directory outside every allowed root: refused, not followed.
    proj.rename(tree / "ro" / "proj.away")
    proj.symlink_to(tree / "outside")
    with pytest.raises(MountRefused, match="now a symlink"):
        pin(mount)
    # Swapped for another directory of the same name: not what was checked either.
    proj.unlink()
    proj.mkdir()
    with pytest.raises(MountRefused, match="changed after it was checked"):
        pin(mount)
    # A link anywhere on the way is refused too.
    proj.rmdir()
    (tree / "ro" / "proj.away").rename(proj)
    moved = tree / "moved"
    (tree / "ro").rename(moved)
    (tree / "ro").symlink_to(moved)
    with pytest.raises(MountRefused, match="no longer a directory reachable"):
        pin(mount)
    with pytest.raises(MountRefused, match="changed after it was checked"):
        pin(Mount(moved / "proj", str(proj), identity=(0, 0)))
    os.close(pin(Mount(moved / "proj", str(proj), identity=mount.identity)))


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


# -- a name that says "secret", on a source file -------------------------------------------

KEYS = {
    "pem": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n",
    "openai": 'API_KEY = "sk-proj-' + "Ab3dE" * 8 + '"\n',
    "github": 'TOKEN = "ghp_' + "aB3dEfGh1J" * 4 + '"\n',
    "aws": 'KEY_ID = "AKIA' + "ABCDEFGH12345678" + '"\n',
    "random": 'SECRET = "' + "q8ZkP2vR7nX4tY1wL9sJ3mB6cH0fD5gA+/Ue" + '"\n',
}


@pytest.mark.parametrize("name", ["token.py", "client_secret.ts", "password_hasher.js",
                                  "token.cpython-311.pyc"])  # fmt: skip
def test_a_source_file_named_like_a_secret_is_mounted_when_it_holds_no_key(
    tree: Path, name: str
) -> None:
    package = tree / "ro" / "pkg" / "auth"
    package.mkdir(parents=True)
    (package / name).write_text("def handle(token: str) -> str:\n    return token.strip()\n")
    assert policy(tree).check(str(tree / "ro" / "pkg")).source == tree / "ro" / "pkg"
    assert policy(tree).check(str(package / name)).source == package / name  # the file alone


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_a_source_file_named_like_a_secret_that_holds_a_key_is_refused(
    tree: Path, kind: str
) -> None:
    package = tree / "ro" / "pkg"
    package.mkdir()
    (package / "tokens.py").write_text("import os\n\n" + KEYS[kind])
    with pytest.raises(MountRefused, match=r"tokens\.py matches 'token\*'"):
        policy(tree).check(str(package))
    with pytest.raises(MountRefused, match="key"):
        policy(tree).check(str(package / "tokens.py"))


@pytest.mark.parametrize(
    ("path", "pattern"),
    [("tokens/mod.py", "token*"), ("token.txt", "token*"), ("secret.pem.py", None),
     (".env.py", ".env*"), ("id_rsa.py", "id_rsa*")],
)  # fmt: skip
def test_only_name_patterns_on_a_source_files_own_name_are_judged_by_content(
    tree: Path, path: str, pattern: str | None
) -> None:
    target = tree / "ro" / "pkg" / path
    target.parent.mkdir(parents=True)
    target.write_text("x = 1\n")
    if pattern is None:  # *secret* on a source name: its content decides, and it is clean
        policy(tree).check(str(tree / "ro" / "pkg"))
        return
    with pytest.raises(MountRefused, match=re.escape(repr(pattern))):
        policy(tree).check(str(tree / "ro" / "pkg"))


def test_a_source_name_that_is_a_fifo_or_a_link_to_a_key_is_refused(tree: Path) -> None:
    package = tree / "ro" / "pkg"
    package.mkdir()
    (package / "token.py").symlink_to(tree / "home" / ".ssh" / "id_rsa")
    with pytest.raises(MountRefused, match="not a regular file"):
        policy(tree).check(str(package))
    (package / "token.py").unlink()
    os.mkfifo(package / "token.py")
    with pytest.raises(MountRefused, match="not a regular file"):
        policy(tree).check(str(package))
