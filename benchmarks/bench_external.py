"""External agents: from `jarvis ask --agent codex` to the agent's first inference
request, against codex-acp started by hand (the same binary, the same config, driven by
three JSON-RPC lines written at once, on the host, no sandbox, no jarvis).

Ours: the whole CLI (imports, config, the agent's HOME, the inference gateway, the
sandbox container with the forwarder, the ACP handshake) until the first request
reaches the engine (an Ollama stand-in). Baseline: the binary alone until its first
request reaches a gateway on loopback. Both answer from a scripted engine.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from .harness import BenchEnv, Row, median

NAME = "external agent: `jarvis ask --agent codex` to its first inference request"


def _skip(reason: str) -> list[Row]:
    return [Row(NAME, float("nan"), "s", baseline_name="codex-acp started by hand",
                notes=f"skipped: {reason}")]  # fmt: skip


def _ours(env: BenchEnv, workspace: Path, config_file: Path) -> float:
    from jarvisd.engines import ScriptedEngine, reply
    from jarvisd.testing import OllamaStandIn

    engine = ScriptedEngine(fallback=reply("done"))
    standin = OllamaStandIn(engine)
    with standin:
        environ = dict(os.environ, OLLAMA_HOST=standin.url, JARVIS_CONFIG=str(config_file))
        start = time.perf_counter()
        proc = subprocess.Popen(
            [env.jarvis_bin(), "ask", "--no-daemon", "--agent", "codex", "--engine", "ollama",
             "--model", "scripted", "Say done."],
            cwd=workspace, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            while not any(path == "/api/chat" for _, path, _ in standin.requests):
                if proc.poll() is not None:
                    raise RuntimeError(f"jarvis ask exited ({proc.returncode}) before inference")
                time.sleep(0.005)
            return time.perf_counter() - start
        finally:
            proc.wait(timeout=120)


async def _by_hand(binary: Path, workspace: Path) -> float:
    from jarvisd._messages import Generation
    from jarvisd._runcontext import RunContext
    from jarvisd.engines import ScriptedEngine, reply
    from jarvisd.external._registry import BUILTIN, GatewayAccess, Setup
    from jarvisd.gateway import Gateway

    first = asyncio.Event()

    def answer(messages: object, tools: object) -> Generation:
        first.set()
        return reply("done")

    engine = ScriptedEngine(fallback=answer)
    with tempfile.TemporaryDirectory(prefix="bench-codex-") as tmp:
        home = Path(tmp)
        async with Gateway(engine, RunContext(), "scripted") as gw:
            assert gw.url is not None and BUILTIN["codex"].prepare is not None
            access = GatewayAccess(gw.url.rstrip("/"), gw.token, "scripted")
            launch = BUILTIN["codex"].prepare(
                Setup(binary.parents[3].parent, home, access, sandboxed=False)
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
            )  # fmt: skip
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write("".join(json.dumps(m) + "\n" for m in lines).encode())
                session = ""
                while not session:  # session/new's reply names the session to prompt
                    reply_line = json.loads(await proc.stdout.readline())
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
                return time.perf_counter() - start
            finally:
                proc.kill()
                await proc.wait()


def run(env: BenchEnv) -> list[Row]:
    from jarvisd.external._install import install_dir, installed
    from jarvisd.external._registry import BUILTIN

    codex = BUILTIN["codex"]
    if not installed(codex):
        return _skip("codex is not installed (jarvis agents install codex)")
    image = os.environ.get("JARVIS_BENCH_AGENT_IMAGE", "jarvis-sandbox:latest")
    binary = install_dir(codex) / codex.binary
    workspace = env.tmp / "codex-ws"
    workspace.mkdir(parents=True, exist_ok=True)
    os.chmod(workspace, 0o777)
    config_file = env.tmp / "codex-bench.toml"
    config_file.write_text(f'[sandbox]\nimage = "{image}"\nallowed_roots = ["{env.tmp}:rw"]\n')
    ours: list[float] = []
    base: list[float] = []
    runs = env.runs(5, 2)
    try:
        _ours(env, workspace, config_file)  # warm-up: page cache, bytecode
        asyncio.run(_by_hand(binary, workspace))
        for _ in range(runs):
            ours.append(_ours(env, workspace, config_file))
            base.append(asyncio.run(_by_hand(binary, workspace)))
    except Exception as exc:  # a benchmark row says why it could not run
        if env.smoke:  # ...but the smoke run exists to see a module break
            raise
        return _skip(f"{type(exc).__name__}: {exc}")
    return [
        Row(
            NAME, median(ours), "s", baseline=median(base),
            baseline_name="codex-acp started by hand (host, no sandbox, same config)",
            notes=f"median of {runs}, interleaved; ours includes the CLI, the gateway, the "
            f"sandbox container ({image}) and the forwarder",
            extra={"ours_min": min(ours), "baseline_min": min(base)},
        )
    ]  # fmt: skip
