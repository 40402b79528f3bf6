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


def run(env: BenchEnv) -> list[Row]:
    try:
        from ray.cluster_utils import Cluster
    except ImportError:
        return [Row("task dispatch through Ray", 0.0, "ms", notes="skipped: ray is not installed (pip install 'jarvisd[cluster]')")]  # fmt: skip
    from jarvisd.daemon import Client
    from jarvisd.engines import ScriptedEngine, reply
    from jarvisd.runs import AgentSpec
    from jarvisd.testing import OllamaStandIn

    root = Path(env.tmp) / f"jc{os.getpid()}"
    saved = dict(os.environ)
    os.environ.update(_env(root / "ray"))  # what the nodes' processes inherit
    try:
        common: dict[str, Any] = {"node_ip_address": "127.0.0.1", "num_cpus": 1}
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
    try:
        with OllamaStandIn(ScriptedEngine(fallback=reply("Red."))) as standin:
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
                    f"[daemon]\nmax_concurrent = 1\n[ui]\nenabled = false\n{cluster_toml}"
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
            for i in range(env.warmups() + runs):
                for name, (_, client) in daemons.items():
                    began = time.perf_counter()
                    info = client.wait(client.submit(AgentSpec(input="hi")).id, timeout=300)
                    took = time.perf_counter() - began
                    if info.state != "succeeded":
                        raise RuntimeError(f"{name} task {info.id}: {info.state} {info.reason}")
                    if i >= env.warmups():
                        times[name].append(took)
    finally:
        for proc, _ in daemons.values():
            proc.terminate()
            proc.wait(60)
        cluster.shutdown()  # type: ignore[no-untyped-call]
    local, ray = percentile(times["local"], 50) * 1000, percentile(times["ray"], 50) * 1000
    return [
        Row(
            "task dispatch through Ray (p50, submit to end)",
            ray,
            "ms",
            baseline=local,
            baseline_name="local worker process",
            target=f"<= local + {TARGET_MS:g} ms",
            passed=ray - local <= TARGET_MS,
            notes=f"{len(times['ray'])} tasks each, interleaved; +{ray - local:.0f} ms",
            extra={"overhead_ms": ray - local},
        )
    ]


def _wait_up(client: object) -> None:
    for _ in range(400):
        try:
            client.ping()  # type: ignore[attr-defined]
            return
        except Exception:
            time.sleep(0.05)
    raise RuntimeError("jarvisd did not start")
