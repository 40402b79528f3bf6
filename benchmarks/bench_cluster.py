"""Cluster rows: a daemon task's dispatch through Ray (``[cluster] backend = "ray"``,
a head and one worker node on this machine, on loopback) against the local worker
process: submit to end of the same one-turn scripted task, p50, the two daemons asked
in turn (interleaved) so the machine's load falls on both alike."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import BenchEnv, Row, percentile

#: The target of the issue: Ray's dispatch costs at most this much more per task.
TARGET_MS = 50.0


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("config", "data", "cache", "state", "runtime"):
        (root / key).mkdir(parents=True, exist_ok=True, mode=0o700)
        env[f"JARVIS_{key.upper()}_DIR"] = str(root / key)
    env.pop("JARVIS_CONFIG", None)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


class _Slow:
    """A scripted engine whose every answer takes ``SLOW_S`` (the 0.2 s tasks)."""

    def __init__(self) -> None:
        from jarvisd.engines import ScriptedEngine, reply

        self._inner = ScriptedEngine(fallback=reply("Red."))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def generate(self, messages: Any, **kwargs: Any) -> Any:
        import asyncio

        if any("slow" in getattr(m, "content", "") for m in messages):
            await asyncio.sleep(SLOW_S)
        return await self._inner.generate(messages, **kwargs)


#: The throughput row: this many tasks, each answered after this many seconds.
THROUGHPUT_TASKS = 200
SLOW_S = 0.2


def run(env: BenchEnv) -> list[Row]:
    try:
        from ray.cluster_utils import Cluster
    except ImportError:
        return [Row("task dispatch through Ray", 0.0, "ms", notes="skipped: ray is not installed (pip install 'jarvisd[cluster]')")]  # fmt: skip
    from jarvisd.daemon import Client
    from jarvisd.runs import AgentSpec
    from jarvisd.testing import OllamaStandIn

    root = Path(env.tmp) / f"jc{os.getpid()}"
    saved = dict(os.environ)
    common: dict[str, Any] = {"node_ip_address": "127.0.0.1", "num_cpus": 1}
    os.environ.update(_env(root / "ray"))  # what the nodes' processes inherit
    try:
        cluster = Cluster(
            initialize_head=True,
            head_node_args={**common, "num_cpus": 0, "include_dashboard": False},
        )
        cluster.add_node(**common, resources={"jarvis": 4})
        cluster.wait_for_nodes()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    daemons: dict[str, tuple[subprocess.Popen[bytes], Client]] = {}
    times: dict[str, list[float]] = {"local": [], "ray": []}
    rows: list[Row] = []
    try:
        with OllamaStandIn(_Slow()) as standin:  # type: ignore[arg-type]
            for name in times:
                proc_env = _env(root / name)
                cluster_toml = (
                    f'[cluster]\nbackend = "ray"\naddress = "{cluster.address}"\n'
                    if name == "ray"
                    else ""
                )
                (root / name / "config" / "config.toml").write_text(
                    f'[engine]\ndefault = "ollama"\nmodel = "scripted"\n'
                    f'[engine.ollama]\nhost = "{standin.url}"\n'
                    f"[daemon]\nmax_concurrent = 8\n[ui]\nenabled = false\n{cluster_toml}"
                )
                proc = subprocess.Popen(
                    [sys.executable, "-m", "jarvisd.daemon", "--log-level", "WARNING"],
                    env=proc_env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                client = Client(root / name / "runtime" / "jarvisd.sock", timeout=300)
                daemons[name] = (proc, client)
                _wait_up(client)
            runs = env.runs(20, 5)
            load = os.getloadavg()[0]
            for i in range(env.warmups() + runs):
                for name, (_, client) in daemons.items():
                    began = time.perf_counter()
                    info = client.wait(client.submit(AgentSpec(input="hi")).id, timeout=300)
                    took = time.perf_counter() - began
                    if info.state != "succeeded":
                        raise RuntimeError(f"{name} task {info.id}: {info.state} {info.reason}")
                    if i >= env.warmups():
                        times[name].append(took)
            local, ray = percentile(times["local"], 50) * 1000, percentile(times["ray"], 50) * 1000
            rows.append(
                Row(
                    "task dispatch through Ray (p50, submit to end)",
                    ray,
                    "ms",
                    baseline=local,
                    baseline_name="local worker process",
                    target=f"<= local + {TARGET_MS:g} ms",
                    passed=ray - local <= TARGET_MS,
                    notes=f"{len(times['ray'])} tasks each, interleaved; +{ray - local:.0f} ms; "
                    f"load {load:.1f} on {os.cpu_count()} cores",
                    extra={"overhead_ms": ray - local},
                )
            )
            if not env.quick or env.smoke:  # the smoke run checks it runs, with 4 tasks
                count = 4 if env.smoke else THROUGHPUT_TASKS
                rows.append(_throughput(cluster, common, root, daemons["ray"][1], count))
    finally:
        for proc, _ in daemons.values():
            proc.terminate()
            proc.wait(60)
        cluster.shutdown()  # type: ignore[no-untyped-call]
    return rows


def _burst(client: Any, count: int) -> float:
    """Tasks per second over ``count`` 0.2 s tasks submitted at once."""
    from jarvisd.runs import AgentSpec

    began = time.perf_counter()
    ids = [client.submit(AgentSpec(input=f"slow {i}")).id for i in range(count)]
    for task_id in ids:
        info = client.wait(task_id, timeout=900)
        if info.state != "succeeded":
            raise RuntimeError(f"task {info.id}: {info.state} {info.reason}")
    return count / (time.perf_counter() - began)


def _throughput(cluster: Any, common: dict[str, Any], root: Path, client: Any, count: int) -> Row:
    """200 tasks on the one worker node, then on two (a second node added): the same
    daemon (max_concurrent 8), the same machine."""
    one = _burst(client, count)
    saved = dict(os.environ)
    os.environ.update(_env(root / "ray"))
    try:
        cluster.add_node(**common, resources={"jarvis": 4})
        cluster.wait_for_nodes()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    load = os.getloadavg()[0]
    two = _burst(client, count)
    return Row(
        f"{count} scripted {SLOW_S:g} s tasks through Ray, 2 nodes against 1",
        two,
        "tasks/s",
        baseline=one,
        baseline_name="1 node",
        notes=f"ratio {two / one:.2f}; each node jarvis=4, max_concurrent 8; load {load:.1f} on "
        f"{os.cpu_count()} cores: both nodes share them, so each task's own worker start "
        "(a Python process) bounds it, not the nodes",
    )


def _wait_up(client: object) -> None:
    for _ in range(400):
        try:
            client.ping()  # type: ignore[attr-defined]
            return
        except Exception:
            time.sleep(0.05)
    raise RuntimeError("jarvisd did not start")
