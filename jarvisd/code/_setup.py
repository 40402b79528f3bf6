"""The project's toolchain for a ``jarvis code`` run: a virtual environment with its
dependencies, test extras and pytest, made in the sandbox and cached on the host.

Installing a project runs its build code, so setup runs IN THE SANDBOX, never on the
host: a venv is made at ``ENV_PATH`` on a fresh cache directory mounted read-write
there, the workspace (read-only) is copied into it (pip writes build files in-tree),
then either the run's setup command or, for a Python project, ``pip install
'.[test,...]' pytest`` (only the extras the project declares) runs in that copy. What
was installed from the copy (the project itself) is uninstalled again: the tests must
import the workspace's source, which the agent edits (``PYTHONPATH`` = the workspace,
and its ``src`` when there is one), not a stale installed copy.

Network: the host's pip sources only (``jarvisd.code._pipconf``) through an egress
proxy of the setup's own; the agent's phase keeps the run's policy (none by default).

The cache, ``<cache>/envs/KEY``: KEY hashes the dependency files, the setup command,
the pip sources, the sandbox image's id and the project's path (``setup_key``). It is built under a temporary name and
renamed when complete (a failed setup leaves nothing). One build of a KEY at a time: the
runs that need it meanwhile (the candidates of one run, a daemon's task and a CLI run)
wait on a lock, then take the one environment from the cache. Then it is mounted read-only at
``ENV_PATH`` into the test command and the agent's sandbox, with ``ENV_PATH/bin`` first
on PATH. It lies outside the workspace, so it is never part of the diff.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import JarvisError, SetupFailed, UsageError
from ..executors._base import Channel, CodeExecutor, ExecRequest, ExecResult

if TYPE_CHECKING:
    from .._config import Config
    from ..netpolicy import NetEvent
    from ._pipconf import PipSources

log = logging.getLogger(__name__)

__all__ = ["ENV_PATH", "SetupPlan", "Toolchain", "plan_setup", "prepare_toolchain"]

#: Where the environment is, in every sandbox of the run (scripts' shebangs name it).
ENV_PATH = "/opt/jarvis-env"
#: Bump when the script below changes what an environment holds.
_FORMAT = "2"
#: The extras installed when the project declares them.
TEST_EXTRAS = ("test", "tests", "testing", "dev")
#: Files that say what a Python project needs (requirements*.txt too).
_PROJECT_FILES = ("pyproject.toml", "setup.cfg", "setup.py")
#: The most of one dependency file read for the key; a larger one is refused.
MAX_DEP_FILE_BYTES = 4 * 1024 * 1024
#: The tail of the setup's output kept for its failure and its outcome.
MAX_SETUP_OUTPUT = 6000
#: One progress line at most (pip prints long ones).
_MAX_LINE = 300
#: The most hosts a setup's record names as reached (pip's sources: a few).
_MAX_HOSTS = 32
#: How long a setup may take unless the sandbox's timeout is longer.
SETUP_TIMEOUT_S = 900.0

_SCRIPT = r"""
set -eu
E=/opt/jarvis-env
echo "creating the virtual environment"
python3 -m venv "$E"
export PATH="$E/bin:$PATH" VIRTUAL_ENV="$E" TMPDIR="$E/.tmp" HOME="$E/.tmp"
mkdir -p "$TMPDIR"
cp -R "$JARVIS_WS/." "$E/.build"
cd "$E/.build"
if [ -n "$JARVIS_SETUP" ]; then
  echo "running: $JARVIS_SETUP"
  /bin/sh -c "$JARVIS_SETUP" 2>&1
else
  set --
  for r in $JARVIS_REQS; do set -- "$@" -r "$r"; done
  if [ -n "$JARVIS_PROJECT" ]; then set -- "$@" "$JARVIS_PROJECT"; fi
  echo "pip install $* pytest"
  # The copy has no repository: a version from git (setuptools-scm, hatch-vcs) would
  # fail the build. The project is uninstalled after anyway; its version does not matter.
  export SETUPTOOLS_SCM_PRETEND_VERSION="${SETUPTOOLS_SCM_PRETEND_VERSION:-0.0.0}"
  python3 -m pip install --progress-bar off --use-pep517 "$@" pytest 2>&1
fi
python3 - <<'PY'
import importlib.metadata as md, subprocess, sys
names = []
for dist in md.distributions():
    try:
        origin = dist.read_text("direct_url.json") or ""
    except OSError:
        origin = ""
    if "/opt/jarvis-env/.build" in origin:
        names.append(dist.metadata["Name"])
if names:
    print("uninstalling", *names, "(the tests import the workspace's source)")
    subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", *names], check=True)
PY
cd /
rm -rf "$E/.build" "$E/.tmp"
find "$E" -name __pycache__ -prune -o -type d -exec chmod a+rx {} + 2>/dev/null || true
chmod -R a+r "$E" 2>/dev/null || true
echo "the environment is ready"
"""


@dataclass(frozen=True, slots=True)
class SetupPlan:
    """What a run's setup does: ``command`` (the run's own), else a pip install of
    ``requirements`` and of the project with ``extras`` (when ``install_project``)."""

    files: tuple[str, ...]
    command: str = ""
    requirements: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    install_project: bool = False

    @property
    def pip_line(self) -> str:
        """The install the detected setup runs, as said to a person."""
        words = [w for r in self.requirements for w in ("-r", r)]
        return " ".join(["pip install", *words, *([self.target] if self.target else []), "pytest"])

    @property
    def target(self) -> str:
        """The pip argument for the project: ``.[test,dev]``, ``.`` or ""."""
        if not self.install_project:
            return ""
        return f".[{','.join(self.extras)}]" if self.extras else "."


@dataclass(frozen=True, slots=True)
class Toolchain:
    """A ready environment: its cache directory and how it was had."""

    path: str
    key: str
    cached: bool
    duration_s: float
    output: str = ""
    network: Mapping[str, Any] = field(default_factory=dict)

    def binds(self) -> tuple[tuple[str, str, bool], ...]:
        return ((self.path, ENV_PATH, True),)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "path": self.path,
            "cached": self.cached,
            "duration_s": self.duration_s,
            "output": self.output,
            "network": dict(self.network),
        }


def run_env(workspace: str) -> dict[str, str]:
    """The variables of a sandbox that uses the environment on ``workspace``."""
    pythonpath = [workspace]
    if os.path.isdir(os.path.join(workspace, "src")):
        pythonpath.append(workspace + "/src")
    # The workspace is read-only for the test command: pytest's cache would only warn.
    return {
        "PATH": f"{ENV_PATH}/bin:/usr/local/bin:/usr/bin:/bin",
        "VIRTUAL_ENV": ENV_PATH,
        "PYTHONPATH": ":".join(pythonpath),
        "PYTEST_ADDOPTS": "-p no:cacheprovider",
    }


def _dependency_files(root: Path) -> tuple[str, ...]:
    names = []
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in entries:
            name = entry.name
            wanted = name in _PROJECT_FILES or (
                name.startswith("requirements") and name.endswith(".txt")
            )
            if wanted and entry.is_file(follow_symlinks=False):
                names.append(name)
    return tuple(sorted(names))


def _read_small(path: Path) -> bytes:
    """A dependency file's bytes (never through a symlink, at most MAX_DEP_FILE_BYTES)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_DEP_FILE_BYTES + 1)
    if len(data) > MAX_DEP_FILE_BYTES:
        raise UsageError(
            f"{path.name} is larger than {MAX_DEP_FILE_BYTES} bytes: not a dependency file "
            "jarvis reads (give --setup CMD or --no-setup)"
        )
    return data


def _declared_extras(root: Path, files: tuple[str, ...]) -> tuple[str, ...]:
    """The test extras the project declares (read, never run: setup.py is searched)."""
    found: set[str] = set()
    if "pyproject.toml" in files:
        import tomllib

        try:
            data = tomllib.loads(_read_small(root / "pyproject.toml").decode("utf-8", "replace"))
        except (tomllib.TOMLDecodeError, OSError):
            data = {}
        project = data.get("project")
        extras = project.get("optional-dependencies") if isinstance(project, dict) else None
        if isinstance(extras, dict):
            found.update(str(k) for k in extras)
    if "setup.cfg" in files:
        import configparser

        parser = configparser.RawConfigParser()
        with contextlib.suppress(configparser.Error, OSError, UnicodeDecodeError):
            parser.read_string(_read_small(root / "setup.cfg").decode("utf-8", "replace"))
            if parser.has_section("options.extras_require"):
                found.update(parser.options("options.extras_require"))
    if "setup.py" in files:
        with contextlib.suppress(OSError):
            text = _read_small(root / "setup.py").decode("utf-8", "replace")
            found.update(re.findall(r"""['"]([\w.-]+)['"]\s*:""", text))
    return tuple(e for e in TEST_EXTRAS if e in found)


def plan_setup(workspace: str, command: str = "", enabled: bool = True) -> SetupPlan | None:
    """The setup of the project in ``workspace``: the run's ``command``, else detected
    for a Python project; None when there is none (or ``enabled`` is false)."""
    root = Path(workspace)
    files = _dependency_files(root)
    if command.strip():
        return SetupPlan(files=files, command=command.strip())
    if not enabled or not files:
        return None
    requirements = tuple(f for f in files if f.startswith("requirements"))
    for name in requirements:
        if not re.fullmatch(r"[\w.+-]+", name):  # it goes through the shell's word split
            raise UsageError(f"{name!r}: a requirements file name jarvis does not pass to pip")
    install = any(f in files for f in _PROJECT_FILES)
    extras = _declared_extras(root, files) if install else ()
    return SetupPlan(files=files, requirements=requirements, extras=extras, install_project=install)


def setup_key(
    plan: SetupPlan, workspace: str, sources: PipSources, image_id: str, project: str = ""
) -> str:
    """The cache key. ``project`` (the project's own path) is in it: the build runs the
    whole copy's code (setup.py imports the package), not only the dependency files, so
    another project with the same dependency files must not be served what this one's
    build left in the environment."""
    digest = hashlib.sha256()

    def add(part: str | bytes) -> None:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big") + data)

    for part in (_FORMAT, image_id, project, plan.command, plan.target, *plan.requirements):
        add(part)
    for name, value in sorted(sources.env().items()):
        add(f"{name}={value}")
    for name in plan.files:
        add(name)
        add(_read_small(Path(workspace) / name))
    return digest.hexdigest()[:32]


def _image_id(executor: CodeExecutor, config: Config) -> str:
    """The sandbox image's id (a rebuilt image gets a new environment); the image's
    name for a backend that has no engine to ask (bwrap: the host's own system)."""
    client = getattr(executor, "client", None)
    if client is None:  # bwrap: the venv links the host's /usr/bin/python3
        try:
            python = os.stat(os.path.realpath("/usr/bin/python3"))
            host = f"{os.path.realpath('/usr/bin/python3')}:{python.st_size}:{python.st_mtime_ns}"
        except OSError:
            host = "no-python3"
        return f"{config.sandbox.backend}:{os.uname().release}:{host}"
    try:
        return str(client().images.get(config.sandbox.image).id)
    except JarvisError:
        raise
    except Exception as exc:
        raise SetupFailed(
            f"the sandbox image {config.sandbox.image} could not be inspected: {exc}"
        ) from exc


def envs_dir() -> Path:
    from .._paths import paths

    return paths().cache / "envs"


async def prepare_toolchain(
    plan: SetupPlan,
    workspace: str,
    config: Config,
    executor: CodeExecutor,
    say: Callable[[str], None] = lambda line: None,
    sources: PipSources | None = None,
    project: str = "",
    on_connect: Callable[[NetEvent], None] | None = None,
) -> Toolchain:
    """The environment ``plan`` makes for ``workspace``: from the cache, else made in
    the sandbox (``say`` gets its progress lines). SetupFailed with the tail of its
    output when it fails (and the hosts the proxy refused, when it refused some)."""
    from ._pipconf import host_pip_sources

    started = time.perf_counter()
    sources = host_pip_sources() if sources is None else sources
    key = setup_key(plan, workspace, sources, _image_id(executor, config), project)
    root = envs_dir()
    final = root / key
    if final.is_dir():
        say(f"environment {key[:12]} from the cache")
        return Toolchain(str(final), key, True, round(time.perf_counter() - started, 3))
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    if os.geteuid() == 0 and getattr(executor, "client", None) is None:
        # bwrap as root runs as the sandbox's user, who must reach the environment to
        # mount it: traverse, not list (keys are hashes; the envs are readable by all).
        os.chmod(root, 0o711)
    async with _building_lock(root, key, say):
        if final.is_dir():  # another run (a candidate of this one) made it meanwhile
            say(f"environment {key[:12]} from the cache (made by another run meanwhile)")
            return Toolchain(str(final), key, True, round(time.perf_counter() - started, 3))
        return await _build_into(
            plan, workspace, config, executor, say, sources, key, final, started, on_connect
        )


@contextlib.asynccontextmanager
async def _building_lock(root: Path, key: str, say: Callable[[str], None]) -> AsyncIterator[None]:
    """One build of ``key`` at a time, across processes (candidates, a daemon and a
    CLI run): an flock on ``<cache>/env-locks/KEY``, polled so the event loop keeps running
    (candidates of one run wait in one process). The lock file stays (empty)."""
    import asyncio
    import fcntl

    locks = root.parent / "env-locks"  # beside the cache: its listing is environments only
    locks.mkdir(exist_ok=True, mode=0o700)
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(locks / key, flags, 0o600)
    try:
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    say(f"environment {key[:12]} is being made by another run: waiting for it")
                    told = True
                await asyncio.sleep(0.25)
        yield
    finally:
        os.close(fd)  # releases the lock


async def _build_into(
    plan: SetupPlan,
    workspace: str,
    config: Config,
    executor: CodeExecutor,
    say: Callable[[str], None],
    sources: PipSources,
    key: str,
    final: Path,
    started: float,
    on_connect: Callable[[NetEvent], None] | None,
) -> Toolchain:
    building = Path(tempfile.mkdtemp(prefix=f".build-{key[:12]}-", dir=final.parent))
    try:
        _hand_to_sandbox(building, config)
        output, network = await _build(
            plan, workspace, config, executor, building, sources, say, on_connect
        )
        _no_set_id(building)
        try:
            os.rename(building, final)
        except OSError:
            if not final.is_dir():  # noqa: ASYNC240 - one stat
                raise
            say("another run made the same environment meanwhile: using it")
    finally:
        if building.exists():  # noqa: ASYNC240 - failed, or another run's rename won
            shutil.rmtree(building, ignore_errors=True)
    took = round(time.perf_counter() - started, 3)
    return Toolchain(str(final), key, False, took, output, network)


def _no_set_id(root: Path) -> None:
    """Drop set-user and set-group id bits the build left (the sandbox's user may set
    them on its own files): the environment stays on the host, read by later runs."""
    import stat

    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
                os.chmod(path, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))


def _hand_to_sandbox(building: Path, config: Config) -> None:
    """The build directory belongs to the sandbox's user (it writes there); readable by
    all (the agent's code runs as another user than the test command)."""
    os.chmod(building, 0o755)
    if os.geteuid() == 0:
        from ..sandbox._policy import SandboxPolicy

        policy = SandboxPolicy.from_config(config)
        os.chown(building, policy.uid, policy.gid)


async def _build(
    plan: SetupPlan,
    workspace: str,
    config: Config,
    executor: CodeExecutor,
    building: Path,
    sources: PipSources,
    say: Callable[[str], None],
    on_connect: Callable[[NetEvent], None] | None = None,
) -> tuple[str, dict[str, Any]]:
    from ..netpolicy import NetPolicy
    from ..sandbox._netrun import RunNetwork
    from ..sandbox._policy import SandboxPolicy

    net = config.sandbox.network
    # The pip sources only, with the config's deny list and hosts map; nothing else of
    # the run's policy: what the agent may reach is not what setup needs.
    policy = NetPolicy.parse(
        allow=list(sources.hosts()),
        deny=list(net.deny),
        hosts=dict(net.hosts),
        source="pip configuration",
    )
    env = _setup_env(plan, workspace, sources)
    binds = [(str(building), ENV_PATH, False)]
    binds += [(real, inside, True) for real, inside in sources.binds()]
    timeout = max(SETUP_TIMEOUT_S, config.sandbox.timeout)
    sandbox = SandboxPolicy.from_config(config)
    async with contextlib.AsyncExitStack() as stack:
        # Always a proxy, even one that allows nothing: what setup tries to reach
        # beyond pip's sources is refused by name, not lost in a resolver's error.
        reached: dict[str, None] = {}

        def connected(event: NetEvent) -> None:
            if event.allowed and len(reached) < _MAX_HOSTS:
                reached[f"{event.host}:{event.port}"] = None
            if on_connect is not None:
                on_connect(event)

        network = await stack.enter_async_context(
            RunNetwork(policy, uid=sandbox.uid, gid=sandbox.gid, publish=connected)
        )
        socket_path = network.socket_path
        request = ExecRequest(
            argv=["/bin/sh", "-c", _SCRIPT],
            timeout=timeout,
            mounts=(workspace,),
            env=env,
            system_binds=tuple(binds),
            proxy_socket=socket_path,
        )
        tail, result = await _run_script(await executor.open(request), say)
        await stack.aclose()
        summary = network.summary
    output = "\n".join(tail)[-MAX_SETUP_OUTPUT:]
    if result.exit_code != 0 or result.reason:
        why = result.reason or f"exit {result.exit_code}"
        refused = ""
        if summary.refused:
            named = ", ".join(dict.fromkeys(summary.refused_hosts))
            refused = (
                f"; the network policy refused {named} "
                f"(setup may reach only pip's sources: {', '.join(sources.hosts()) or 'no host'})"
            )
        raise SetupFailed(f"the setup failed ({why}){refused}; its output ends:\n{output}")
    return output, {**summary.to_dict(), "hosts": list(reached)}


def _setup_env(plan: SetupPlan, workspace: str, sources: PipSources) -> dict[str, str]:
    """The setup script's environment: pip's sources and what to install where."""
    return {
        **sources.env(),
        "JARVIS_WS": workspace,
        "JARVIS_SETUP": plan.command,
        "JARVIS_REQS": " ".join(plan.requirements),
        "JARVIS_PROJECT": plan.target,
        "PYTHONDONTWRITEBYTECODE": "",
        "PYTHONPATH": "",
    }


async def _run_script(
    channel: Channel, say: Callable[[str], None]
) -> tuple[collections.deque[str], ExecResult]:
    """The setup script's run on ``channel``: each line of its output said as it comes,
    its tail kept (about MAX_SETUP_OUTPUT characters, stderr's tail after it)."""
    tail: collections.deque[str] = collections.deque()
    size = 0
    try:
        await channel.close_stdin()
        while raw := await channel.readline(64 * 1024):
            line = raw.decode("utf-8", "replace").rstrip()[:_MAX_LINE]
            tail.append(line)
            size += len(line) + 1
            while size > MAX_SETUP_OUTPUT and len(tail) > 1:
                size -= len(tail.popleft()) + 1
            if line:
                say(line)
        result = await channel.wait()
    except BaseException:
        await channel.stop("cancelled")
        raise
    if result.stderr:
        tail.append(result.stderr[-MAX_SETUP_OUTPUT:])
    return tail, result


class ToolchainExecutor(CodeExecutor):
    """``inner``, whose programs (the test command) see the environment: mounted
    read-only, first on PATH, the workspace's source on PYTHONPATH (a wrapper: the
    backend is not changed)."""

    def __init__(self, inner: CodeExecutor, toolchain: Toolchain, workspace: str) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        self.isolated = inner.isolated  # type: ignore[misc]
        self._binds, self._env = toolchain.binds(), run_env(workspace)

    def _add(self, request: ExecRequest) -> ExecRequest:
        return dataclasses.replace(
            request,
            system_binds=(*request.system_binds, *self._binds),
            env={**self._env, **request.env},
        )

    async def open(self, request: ExecRequest) -> Channel:
        return await self.inner.open(self._add(request))

    async def prepare(self, request: ExecRequest) -> None:
        await self.inner.prepare(self._add(request))

    async def check(self) -> None:
        await self.inner.check()

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


def with_toolchain(executor: CodeExecutor, toolchain: Toolchain, workspace: str) -> CodeExecutor:
    return ToolchainExecutor(executor, toolchain, workspace)
