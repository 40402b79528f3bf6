"""Sandboxed external agents: from `jarvis ask --agent NAME` to the agent's first
inference request, against the same agent started by hand on the host (the same
program, the same config, driven by JSON-RPC lines, no sandbox, no jarvis).

Ours is the whole command until the first request reaches the engine (an Ollama
stand-in): the CLI, the question to jarvisd (its warm ask worker) or, with
``--no-daemon``, every import in a fresh process, the agent's HOME, the inference
gateway, the sandbox container with the forwarder, the ACP handshake, and the gateway's
call into the engine. The baseline is the agent alone, until its first request reaches
a gateway on loopback. Runs are interleaved, one run of each in turn.

Profile (2026-11-29, the 2-core machine loaded by other jobs, load 4 to 10: read the
shares, not the absolute times). Each step timed with wrappers; the container's own
steps with timestamps its forwarder wrote. Seconds, codex, before this change:

| step | `--no-daemon` | warm worker |
|---|---|---|
| Python start, CLI imports, config, the agent picked | 0.30 | - |
| `import acp` (the ACP SDK: hundreds of pydantic models) | 0.60 | - |
| HOME, gateway start, mount checks (MountPolicy), covers | 0.006 | 0.007 |
| docker client, mount staging, container config | 0.030 | 0.031 |
| container create / attach / start | 0.031 / 0.002 / 0.112 | 0.051 / 0.015 / 0.111 |
| prelude (mounts verified), gateway bound to the container | 0.017 | 0.026 |
| forwarder: Python start, its imports, the agent spawned | 0.057 | 0.072 |
| codex-acp: spawned to `initialize` answered | 0.17 | 0.29 |
| `session/new`, the prompt, to the gateway's first request | 0.14 | 0.17 |
| gateway to the engine (first call: client, `/api/show`) | 0.10 | 0.001 |
| total | 1.56 | 0.81 |

"warm worker" is a second run in one process, as jarvisd's ask worker runs it: the
imports are paid once per worker. What changed: the ACP SDK is imported in a thread
while the gateway and the container start (`--no-daemon` and a fresh worker: up to
the container's 0.2 s hidden); the agent's launch (argv, environment, config files)
travels in a start frame on stdin, so the container's command is the same for every
run; the forwarder spawns the agent with ``posix_spawn`` instead of importing
``subprocess`` (its start in the container: 63 to 49 ms at best of 21, loaded; 14 ms
is Python's own). The rest is the container's create and start (0.15 s) and the
agent itself: the pool (created and started ahead, its forwarder waiting for the start
frame) would take the first off, measured by hand at 0.23 s of 1.18 s at p50 under
load; it needs the run's mounts (HOME with the gateway's socket, the workspace) to
exist before the run, which a pooled container cannot have yet.

The client (2026-11-29, after the pool): `jarvis ask` on its way to jarvisd imported
asyncio (with ssl and concurrent.futures, through ``_runcontext`` and ``LocalHost``),
every frame of the sandbox protocol (``jarvisd.protocol``'s eager ``__init__``) and the
daemon's 15 task and status messages (a frozen dataclass costs about 0.5 ms to create,
1 ms and more loaded). None of them now: asyncio is imported where it runs, the
protocol's names load on first use, the task messages live in ``daemon/_taskwire.py``;
the client is a blocking socket (``tests/test_import_graph.py`` holds the path to a
list, run through the real command). Measured as a whole process, from its exec to its
question's first byte on jarvisd's socket (a stand-in answering at once; 20 pairs
interleaved with the tree before, load 16 to 17): 417 -> 306 ms at p50 (-112 ms; the
pairs' median ratio 0.68), its CPU 188 -> 128 ms (-60 ms); at load 9, 458 -> 402 ms
and 256 -> 188 ms of CPU. ``jarvis --help`` and ``jarvis ask --help`` are unchanged
(0.195 s either way). What the client still loads before it sends: click (about a
third), the run context with the messages and events, the spec, the socket client and
the ask messages (66 dataclasses were created before, 34 now). On the daemon's side the
hand-off is about 3 ms (the request parsed, a ping to the warm worker, the start frame:
strace). End to end, this row's run (`_ours`, an idle started codex claimed) with one
jarvisd and the client of each tree in turn, to the stand-in's first request: 0.508 ->
0.446 s at p50 (10 pairs, load 9 to 11) and 0.442 -> 0.379 s (12 pairs, load 9): -62 ms
both times, the pairs' median ratio 0.88 and 0.86. The whole module run twice at load 10
to 16 (before / after): 1.01 / 1.14 s against the host's 0.55 / 0.58 s, where the
interleaved host runs and other jobs move the row by more than the client's share.

opencode (2026-11-29, where the last run's +43 s went). Nothing in its sandboxed start
waits: run by hand in the container and on the host with timestamps, its own logs
(``--log-level DEBUG``) and ``strace -f -e trace=execve,connect,openat`` on the host,
the only network it tries is the npm registry, for the ``@opencode-ai/plugin`` package
it installs into its config dir (no DNS in the container: it fails at once and the run
goes on; on the host it took seconds and 0.3 to 0.5 CPU-seconds before the first
request). Its launch now marks that package installed, on both sides (the host run here
is prepared by the same function). The model list fetch, autoupdate and LSP downloads
are off already, and the host's HOME is as fresh as the container's (each run has its
own, both caches cold).
Turning off its default plugins, Claude Code files, external skills and file finder
(``OPENCODE_DISABLE_DEFAULT_PLUGINS`` and friends) changed nothing measurable (CPU 4.5
to 5.4 s either way). It is CPU: opencode (a Bun single-file binary of 150 MB, 8 to 13
threads) burns 3.6 to 4.7 CPU-seconds to its first request on the host and 4.5 to 5.7 in
the container (codex: a fraction of a second), and the container is held to
``sandbox.cpus`` (1.0) while the host run spreads over both cores. On this machine
(cgroup v1, the engine's containers all under one ``/docker`` group whose weight is
one host thread's) a loaded host starves every container: load 0.6, 4.3 to 5.7 s on the
host and 7.3 to 7.8 s sandboxed; load 10, 7.1 and 9.7 s against 16 to 18 s (not
throttled by its quota, no memory limit hit: 392 to 409 MiB of 512 at peak); load 22 to
32 (the last run), 12.5 against 55.6 s. The rows now give each side's CPU seconds to
the first request and the load, so a gap that is scheduling shows as such.

The pool, built (2026-11-29, ``jarvisd.external._agentpool``): jarvisd keeps
``agents.warm`` (default 1) idle codex agents, each a sandbox container whose forwarder
has its start frame and whose codex-acp has answered ``initialize``; a `jarvis ask
--agent codex` run that fits claims one (the warm pool's rename hand-over,
``_handout.PoolKeeper`` with a slot maker), and its start is then: claim (a rename,
the slot's file), the allowlist's check of the workspace and its bind from a pinned
descriptor into the slot's ``rslave`` root directory (10 ms: it propagates into the
container at the workspace's own path), the gateway on the slot's socket directory
with the slot's token, the attach, ``initialize`` again (codex answers at once),
``session/new`` and the prompt. The container's create and start, Python's start in it,
the forwarder and codex's own start (0.5 s together on a quiet machine) are off the
clock; an idle agent's memory is its own row (12.5 MB). Profile on a started agent
(timestamps in the ask worker, load 5 to 7): `jarvis ask` from its launch to the ask
worker's run 0.2 to 0.4 s (Python, the CLI's imports, about 150 ms of them, 56 ms
``jarvisd.sandbox._netrun``, the question to jarvisd); in the worker, the claim and
attach 12 to 25 ms, the gateway 1 ms, the workspace's check and mount 4 ms, the ACP SDK
already imported, ``initialize`` 2 ms, ``session/new`` 20 to 40 ms; the prompt to the
gateway's first request 0.1 s. Measured (``--only bench_external``, three runs, load 5 to 6.7):
codex on a started agent 0.48 to 0.54 s at p50 (p95 0.58 to 1.13) against 0.37 to
0.40 s on the host (CPU 0.18-0.19 against 0.14-0.16 s); on its own container 0.77 to
0.88 s; ``--no-daemon`` 1.49 to 1.70 s; at load 2 (by hand, the same path) 0.30 to
0.34 s. What is left on the clock is mostly the CLI's (the host run has none). The rows: codex through jarvisd on a
started agent (the issue's row), on its own container (a run with ``--mount``, which
no started agent takes), ``--no-daemon``. What the pool needed (checked before it was
built): a started agent already holds what its launch gave it, so an agent started
ahead needs, before any run, (1) the gateway's
token: the gateway checks it on every request, and opencode reads it from its config
and codex from its environment at their start, before ``initialize``; a token minted
with the slot and adopted by the claiming run's gateway opens nothing while the slot is
idle and dies with its run (the forwarder adding it per request would mean parsing HTTP
in a byte relay); (2) the socket's directory: a per-slot home bound at create time, in
which the claiming run's gateway puts its socket; (3) the model's name: any name will
do, the gateway serves the run's model whatever is asked; (4) the workspace, delivered
at claim (mount propagation into a per-slot directory, or an archive). Runs with
``--tools`` (opencode's permissions are in its config), ``--mount``, a toolchain,
egress, a copied workspace or a daemon task (its HOME is kept for a resume) take the
usual path; a workspace's ``.git`` is mounted read-only over it at claim, as on the
usual start.
opencode started ahead (2026-11-29). Measured first, by hand on the host (opencode
spawned with the slot's launch, ``initialize`` answered, idle 4 s, then timed; load 0.3
to 8): ``initialize`` 4 to 7 s (2.0 to 2.6 CPU-s); the first ``session/new`` 3.7 s (1.5
CPU-s) and the prompt to the first request 0.4 to 0.7 s, so a started opencode alone
would still leave 4.4 s on the clock: it does most of its work lazily, at its first
``session/new`` (its per-directory instance: config, agents, tools; no file, process
or network activity under strace between the request and its reply, all JavaScript).
A warm-up ``session/new`` in another directory (3.4 to 3.7 CPU-s) takes that off: the
run's ``session/new`` is then 1.3 to 1.6 s (0.6 CPU-s: a directory opencode has not
seen; more warm-ups in other directories do not lower it, 0.54 to 0.79 CPU-s each; one
in the very directory: 0.03 s, but a slot cannot know it), the prompt 0.4 to 0.5 s. So
a slot of opencode opens one session in an empty directory of its HOME before it is
ready; that session is never prompted, and the run's client takes only its own
session's updates. Disabling its default plugins, Claude Code files, external skills,
file finder and file watcher changed neither (1.6 s, 0.62 CPU-s). An idle opencode
holds 290 to 415 MB (USS on the host; its container's row below). What its launch read
of a run, made run-independent as codex's: the gateway's URL (the forwarder's, fixed)
and token (minted with the slot), the model (``SLOT_MODEL``; its context window is not
in its config: it never compacts on its own), the permissions (those of a run without
``--tools`` and without egress, the only runs that claim a slot), the workspace
(``session/new``'s cwd, mounted at claim); one input stays: opencode picks its system
prompt by the model's name (``gpt-*``, ``o1``/``o3``, ``claude``, ``gemini-``, ``kimi``
... each their own), so a run whose model name picks another prompt than
``SLOT_MODEL``'s takes the usual start (``_agentpool.fits_model``; local model names
all fit). The row's target: opencode's row keeps the relative reading (at most 0.4 s
more than opencode started by hand on the host, whose start is seconds of its own);
its note gives the absolute 0.4 s reading too. The bench's jarvisd has
``sandbox.memory = "1g"``: the warm-up session is opened from 1 GiB on (with the run's
session beside it opencode went past 512 MiB and was killed; under 1 GiB a slot has none
and the run's ``session/new`` carries its seconds). Measured (``--only bench_external``,
three runs, the machine loaded by other jobs): at load 7.3 (1g), opencode on a started
agent 2.83 s at p50 (p95 2.90) against 4.71 s (p95 6.00) started by hand on the host,
-1.88 s (CPU: 4.83 s in its container's whole life, the idle start included, against
3.72 s on the host); at 512m with the warm-up (before it was held to 1 GiB), load 8.9:
4.23 s against 9.89 s, load 17: 12.6 s against 15.9 s. codex in the same run (load
7.4): 0.410 s at p50 (p95 1.16) against 0.407 s on the host. Against the absolute 0.4 s
opencode is over by 2.4 s: what is left is the run's own ``session/new`` in a new directory and the
prompt, 0.8 to 0.9 CPU-seconds of opencode held to ``sandbox.cpus`` (1) in a container
group the loaded host starves (by hand on the host, idle: 1.7 to 2.0 s). An idle
opencode's container: 268 to 294 MB (codex: 12.5 MB).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from .harness import BenchEnv, Row, median, percentile

#: The agents measured, with how many interleaved runs (opencode's own start takes
#: seconds: fewer of them).
AGENTS = {"codex": (7, 3), "opencode": (3, 2)}
#: Issue 36's target for a sandboxed agent's start, at p50.
TARGET_S = 0.4
NO_DAEMON = "external agent: `jarvis ask --agent codex` to its first inference request"


def _name(agent: str) -> str:
    return (
        f"sandboxed external agent: `jarvis ask --agent {agent}` (jarvisd) to its first "
        "inference request (p50)"
    )


def _skip(name: str, reason: str) -> Row:
    return Row(name, float("nan"), "s", baseline_name="the agent started by hand on the host",
               notes=f"skipped: {reason}")  # fmt: skip


def _ours(env: BenchEnv, agent: str, workspace: Path, environ: Mapping[str, str],
          standin: object, *, daemon: bool, cpu: list[float] | None = None,
          options: tuple[str, ...] = ()) -> float:  # fmt: skip
    """One `jarvis ask --agent AGENT` until the stand-in sees its first chat request;
    ``cpu`` gets the CPU seconds its container had used by then. When jarvisd keeps
    started agents of AGENT, the run waits until one is idle (the pool refills between
    runs: a user's next question comes seconds later, not in the same second)."""
    requests: list[tuple[str, str, object]] = standin.requests  # type: ignore[attr-defined]
    slot = _idle_slot(environ, agent) if daemon else None
    seen = len(requests)
    start = time.perf_counter()
    proc = subprocess.Popen(
        [env.jarvis_bin(), "ask", *([] if daemon else ["--no-daemon"]), "--agent", agent,
         *options, "Say done."],
        cwd=workspace, env=dict(environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    box = _Container(workspace, slot) if cpu is not None else None
    try:
        while not any(path == "/api/chat" for _, path, _ in requests[seen:]):
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(
                    f"jarvis ask exited ({proc.returncode}) before inference: {err[-300:]}"
                )
            if box is not None:
                box.look()
            time.sleep(0.003)
        took = time.perf_counter() - start
        if box is not None and cpu is not None:
            cpu.append(box.cpu_seconds())
        return took
    finally:
        if box is not None:
            box.close()
        proc.communicate(timeout=120)


class _Container:
    """The run's sandbox container, found while it starts (by the bench's workspace,
    a fresh temporary directory, among its mounts), to read the CPU it had used at the
    first request: the run may end and remove it a moment later."""

    def __init__(self, workspace: Path, slot: str | None = None) -> None:
        import docker

        self.client = docker.from_env()
        self.workspace = str(workspace)
        self.found: object | None = None
        self.next_look = 0.0
        #: The idle agent's container the run will claim (its mounts do not name the
        #: workspace: it arrives by propagation).
        self.slot = slot

    def look(self) -> None:
        from jarvisd.sandbox._policy import LABEL

        if self.found is not None or time.monotonic() < self.next_look:
            return
        if self.slot is not None:
            import docker.errors

            try:
                self.found = self.client.containers.get(self.slot)
            except docker.errors.NotFound:  # removed (an earlier bench's, or ended): no CPU
                self.slot = None
            return
        self.next_look = time.monotonic() + 0.25  # few calls: the engine is busy starting it
        for container in self.client.containers.list(filters={"label": LABEL}):
            mounts = container.attrs.get("Mounts") or []
            if any(m.get("Destination") == self.workspace for m in mounts):
                self.found = container
                return

    def cpu_seconds(self) -> float:
        self.look()
        if self.found is None:
            return float("nan")
        try:
            stats = self.found.stats(stream=False, one_shot=True)  # type: ignore[attr-defined]
            return float(stats["cpu_stats"]["cpu_usage"]["total_usage"]) / 1e9
        except Exception:  # gone already: the row says nan
            return float("nan")

    def close(self) -> None:
        self.client.close()


async def _by_hand(agent: str, workspace: Path, cpu: list[float] | None = None) -> float:
    """The agent alone on the host: initialize, session/new, then the prompt, until
    its first request reaches a gateway on loopback; ``cpu`` gets the CPU seconds it
    (and its children) had used by then."""
    from jarvisd._messages import Generation
    from jarvisd._runcontext import RunContext
    from jarvisd.engines import ScriptedEngine, reply
    from jarvisd.external._install import install_dir
    from jarvisd.external._registry import BUILTIN, GatewayAccess, Setup
    from jarvisd.gateway import Gateway

    first = asyncio.Event()

    def answer(messages: object, tools: object) -> Generation:
        first.set()
        return reply("done")

    definition = BUILTIN[agent]
    engine = ScriptedEngine(fallback=answer)
    with tempfile.TemporaryDirectory(prefix=f"bench-{agent}-") as tmp:
        home = Path(tmp)
        (home / "tmp").mkdir()
        async with Gateway(engine, RunContext(), "scripted") as gw:
            assert gw.url is not None and definition.prepare is not None
            access = GatewayAccess(gw.url.rstrip("/"), gw.token, "scripted")
            launch = definition.prepare(
                Setup(install_dir(definition), home, access, sandboxed=False)
            )
            for name, text in launch.files.items():
                (home / name).parent.mkdir(parents=True, exist_ok=True)
                (home / name).write_text(text)
            lines = [
                {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                 "params": {"protocolVersion": 1, "clientCapabilities": {}}},
                {"jsonrpc": "2.0", "id": 1, "method": "session/new",
                 "params": {"cwd": str(workspace), "mcpServers": []}},
            ]  # fmt: skip
            start = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(
                *launch.argv, cwd=workspace, env=dict(launch.env),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
                limit=16 * 2**20,
            )  # fmt: skip
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write("".join(json.dumps(m) + "\n" for m in lines).encode())
                session = ""
                while not session:  # session/new's reply names the session to prompt
                    line = await proc.stdout.readline()
                    if not line:
                        raise RuntimeError(f"{agent} exited before session/new")
                    reply_line = json.loads(line)
                    if reply_line.get("id") == 1:
                        session = reply_line["result"]["sessionId"]
                prompt = {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "session/prompt",
                    "params": {
                        "sessionId": session,
                        "prompt": [{"type": "text", "text": "Say done."}],
                    },
                }
                proc.stdin.write((json.dumps(prompt) + "\n").encode())
                await first.wait()
                took = time.perf_counter() - start
                if cpu is not None:
                    import psutil

                    used = psutil.Process(proc.pid).cpu_times()
                    cpu.append(used.user + used.system + used.children_user
                               + used.children_system)  # fmt: skip
                return took
            finally:
                proc.kill()
                await proc.wait()


def _slot_dirs(environ: Mapping[str, str], agent: str) -> list[Path]:
    return list((Path(environ["JARVIS_RUNTIME_DIR"]) / "agent-pool").glob(f"{agent}-*"))


def _idle_slot(environ: Mapping[str, str], agent: str, wait: float = 180.0) -> str | None:
    """The id of an idle started ``agent`` jarvisd keeps, once there is one (None: it
    keeps none of that agent)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        dirs = _slot_dirs(environ, agent)
        if not dirs:
            return None
        for directory in dirs:
            ready = sorted(os.listdir(directory / "ready"))
            if ready:
                return ready[0]
        time.sleep(0.05)
    raise RuntimeError(f"jarvisd kept no idle {agent} agent within {wait} s")


def _idle_memory_row(environ: Mapping[str, str], agent: str) -> Row:
    """What an idle started ``agent`` holds: its container's memory (the cgroup's usage
    less its page cache), median of the idle agents seen over a few seconds."""
    import docker

    client = docker.from_env()
    seen: list[float] = []
    try:
        for _ in range(5):
            slot = _idle_slot(environ, agent)
            if slot is None:
                break
            stats = client.containers.get(slot).stats(stream=False)
            memory = stats.get("memory_stats") or {}
            cache = (memory.get("stats") or {}).get("cache", 0)
            seen.append((memory.get("usage", 0) - cache) / 2**20)
            time.sleep(0.5)
    finally:
        client.close()
    what = (
        "codex-acp waiting after initialize"
        if agent == "codex"
        else "opencode waiting after initialize and its warm-up session/new"
    )
    return Row(
        f"an idle started {agent} (agents.warm): memory",
        median(seen) if seen else float("nan"), "MB",
        notes=f"its container's memory less page cache, median of {len(seen)} looks: "
        f"{what}, the forwarder, the container's init",
    )  # fmt: skip


def _daemon_env(root: Path, url: str, image: str) -> dict[str, str]:
    """jarvis's directories under ``root`` (the agents stay where they are installed),
    a config that points at the stand-in and allows the workspace."""
    from jarvisd.external._install import agents_dir

    environ = dict(os.environ, JARVIS_AGENTS_DIR=str(agents_dir()))
    for key in ("config", "data", "cache", "state", "runtime"):
        (root / key).mkdir(parents=True, exist_ok=True, mode=0o700)
        environ[f"JARVIS_{key.upper()}_DIR"] = str(root / key)
    environ.pop("JARVIS_CONFIG", None)
    (root / "config" / "config.toml").write_text(
        f'[engine]\ndefault = "ollama"\nmodel = "scripted"\n[engine.ollama]\nhost = "{url}"\n'
        f'[sandbox]\nimage = "{image}"\nallowed_roots = ["{root}:rw"]\n'
        # opencode's started agents open their warm-up session from 1 GiB on.
        'memory = "1g"\n'
        # Both agents' rows measure a started agent (opencode is not kept by default).
        '[agents]\nwarm_agents = ["codex", "opencode"]\n'
    )
    return environ


def _wait_for_daemon(environ: Mapping[str, str], daemon: subprocess.Popen[bytes]) -> None:
    probe = [sys.executable, "-c", "from jarvisd.daemon import Client; Client(timeout=5).ping()"]
    for _ in range(400):
        if daemon.poll() is not None:
            raise RuntimeError(f"jarvisd exited ({daemon.returncode})")
        if subprocess.run(probe, env=dict(environ), capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    raise RuntimeError("jarvisd did not answer")


def run(env: BenchEnv) -> list[Row]:
    from jarvisd.engines import ScriptedEngine, reply
    from jarvisd.external._install import installed
    from jarvisd.external._registry import BUILTIN
    from jarvisd.testing import OllamaStandIn

    image = os.environ.get("JARVIS_BENCH_AGENT_IMAGE", "jarvis-sandbox:latest")
    root = Path(tempfile.mkdtemp(prefix="jx", dir=env.tmp))  # short: sockets live here
    workspace = root / "ws"
    workspace.mkdir()
    for path in (root, workspace):
        os.chmod(path, 0o777 if path == workspace else 0o755)
    agents = [a for a in AGENTS if installed(BUILTIN[a])]
    rows = [_skip(_name(a), f"{a} is not installed (jarvis agents install {a})")
            for a in AGENTS if a not in agents]  # fmt: skip
    if not agents:
        return rows
    with OllamaStandIn(ScriptedEngine(fallback=reply("done"))) as standin:
        environ = _daemon_env(root, standin.url, image)
        log = open(root / "jarvisd.log", "ab")  # noqa: SIM115 - closed below
        daemon = subprocess.Popen(
            [sys.executable, "-m", "jarvisd.daemon", "--log-level", "WARNING"],
            env=environ, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            _wait_for_daemon(environ, daemon)
            for agent in agents:
                rows.append(_row(env, agent, workspace, environ, standin, image))
            rows.extend(_idle_memory_row(environ, agent) for agent in agents)
            if "codex" in agents:
                rows.append(_own_container_row(env, root, environ, standin, image))
                rows.append(_no_daemon_row(env, workspace, environ, standin, image))
        except Exception as exc:  # a benchmark row says why it could not run
            if env.smoke:  # ...but the smoke run exists to see a module break
                raise
            rows.append(_skip(NO_DAEMON, f"{type(exc).__name__}: {exc}"))
        finally:
            daemon.terminate()
            daemon.wait(60)
            log.close()
    return rows


def _row(env: BenchEnv, agent: str, workspace: Path, environ: Mapping[str, str],
         standin: object, image: str) -> Row:  # fmt: skip
    ours: list[float] = []
    base: list[float] = []
    for _ in range(env.warmups()):  # the ask worker's imports, the page cache
        _ours(env, agent, workspace, environ, standin, daemon=True)
        asyncio.run(_by_hand(agent, workspace))
    runs = env.runs(*AGENTS[agent])
    ours_cpu: list[float] = []
    base_cpu: list[float] = []
    load = os.getloadavg()[0]
    for _ in range(runs):
        ours.append(_ours(env, agent, workspace, environ, standin, daemon=True, cpu=ours_cpu))
        base.append(asyncio.run(_by_hand(agent, workspace, base_cpu)))
    load = (load + os.getloadavg()[0]) / 2
    p50, host = median(ours), median(base)
    # A run that ends fast has its container removed before its CPU is read (nan).
    read = [c for c in ours_cpu if not math.isnan(c)]
    cpu = f"{median(read):.2f} s ({len(read)} of {runs} read)" if read else "not read"
    # codex starts in ~0.2 s on the host: the target is the whole start. opencode's own
    # start takes seconds anywhere: what jarvis adds to it is held to the same 0.4 s.
    budget = TARGET_S if agent == "codex" else host + TARGET_S
    return Row(
        _name(agent), p50, "s", baseline=host,
        baseline_name=f"{agent} started by hand (host, no sandbox, same config)",
        target=f"<= {TARGET_S} s at p50" if agent == "codex"
        else f"<= {TARGET_S} s more than on the host at p50",
        passed=p50 <= budget,
        notes=f"{runs} runs interleaved; {p50 - host:+.2f} s at p50; p95 "
        f"{percentile(ours, 95):.2f} vs {percentile(base, 95):.2f} s; jarvisd's warm ask "
        + "worker, an idle started agent claimed (agents.warm), the workspace mounted "
        "into it, the gateway adopting its token, session/new, engine; CPU (its "
        "container's whole life, the idle start included) "
        + f"to the first request {cpu} (container) vs "
        f"{median(base_cpu):.2f} s (host); load {load:.1f}"
        + ("" if agent == "codex" else
           f"; against the absolute {TARGET_S} s: {p50 - TARGET_S:+.2f} s"),
        extra={"ours_min": min(ours), "baseline_min": min(base),
               "ours_cpu_s": median(read) if read else float("nan"), "baseline_cpu_s": median(base_cpu),
               "load": load},
    )  # fmt: skip


def _no_daemon_row(env: BenchEnv, workspace: Path, environ: Mapping[str, str],
                   standin: object, image: str) -> Row:  # fmt: skip
    ours: list[float] = []
    base: list[float] = []
    runs = env.runs(5, 2)
    for _ in range(runs):
        ours.append(_ours(env, "codex", workspace, environ, standin, daemon=False))
        base.append(asyncio.run(_by_hand("codex", workspace)))
    return Row(
        NO_DAEMON, median(ours), "s", baseline=median(base),
        baseline_name="codex-acp started by hand (host, no sandbox, same config)",
        notes=f"--no-daemon: median of {runs}, interleaved; ours includes every import in a "
        f"fresh process, the gateway, the sandbox container ({image}) and the forwarder",
        extra={"ours_min": min(ours), "baseline_min": min(base)},
    )  # fmt: skip


def _own_container_row(env: BenchEnv, root: Path, environ: Mapping[str, str],
                       standin: object, image: str) -> Row:  # fmt: skip
    """codex through jarvisd on its usual start (its own container created and started
    on the clock): a run with ``--mount``, which no started agent takes."""
    repo, extra = root / "repo", root / "extra"
    for path in (repo, extra):
        path.mkdir(exist_ok=True)
        os.chmod(path, 0o777)
    ours: list[float] = []
    base: list[float] = []
    for i in range(env.warmups() + env.runs(5, 2)):
        took = _ours(env, "codex", repo, environ, standin, daemon=True,
                     options=("--mount", str(extra)))  # fmt: skip
        host = asyncio.run(_by_hand("codex", repo))
        if i >= env.warmups():
            ours.append(took)
            base.append(host)
    return Row(
        "codex through jarvisd on its own container (no started agent fits: --mount) to "
        "its first inference request (p50)", median(ours), "s",
        baseline=median(base), baseline_name="codex started by hand (host, no sandbox)",
        notes=f"{len(ours)} runs interleaved; p95 {percentile(ours, 95):.2f} vs "
        f"{percentile(base, 95):.2f} s; what a run the pool does not fit pays",
        extra={"ours_min": min(ours), "baseline_min": min(base)},
    )  # fmt: skip
