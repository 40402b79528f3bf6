"""jarvisd rows: `ask` through the daemon (answered in its warm ask worker) against
calling the same engine directly (interleaved), 200 tasks submitted at once, daemon
memory with 100+ queued tasks, submissions per second (a scripted engine behind a real
Ollama-protocol server, so the numbers measure jarvis, not a model), and the daemon's
and its workers' memory after an `ask` on the embedded model and after the idle unload."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from benchmarks.harness import BenchEnv, Row, percentile, time_commands

TASKS = 200


def _daemon_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("config", "data", "cache", "state", "runtime"):
        # 0700: jarvisd and its clients refuse a runtime directory others could use.
        (root / key).mkdir(parents=True, exist_ok=True, mode=0o700)
        env[f"JARVIS_{key.upper()}_DIR"] = str(root / key)
    env.pop("JARVIS_CONFIG", None)
    return env


def run(env: BenchEnv) -> list[Row]:
    import psutil

    from jarvisd._messages import Message
    from jarvisd._paths import paths
    from jarvisd.daemon import Client
    from jarvisd.engines import OllamaEngine, ScriptedEngine, reply
    from jarvisd.runs import AgentSpec
    from jarvisd.testing import OllamaStandIn

    real_models = paths().models  # before the directories move to the bench's own
    root = Path(env.tmp) / f"jd{os.getpid()}"
    proc_env = _daemon_env(root)
    os.environ.update({k: v for k, v in proc_env.items() if k.startswith("JARVIS_")})
    engine = ScriptedEngine(fallback=reply("Red, yellow and blue."))
    rows: list[Row] = []
    with OllamaStandIn(engine) as standin:
        (root / "config" / "config.toml").write_text(
            f'[engine]\ndefault = "ollama"\nmodel = "scripted"\n'
            f'[engine.ollama]\nhost = "{standin.url}"\n[daemon]\nmax_concurrent = 2\n'
        )
        log = open(root / "jarvisd.log", "ab")  # noqa: SIM115 - closed below
        daemon = subprocess.Popen(
            [sys.executable, "-m", "jarvisd.daemon", "--log-level", "WARNING"],
            env=proc_env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        client = Client(timeout=120)
        try:
            for _ in range(200):
                try:
                    client.ping()
                    break
                except Exception:
                    time.sleep(0.05)
            rows.append(_ask_row(env, client, standin.url, Message, OllamaEngine, AgentSpec))
            rows.append(_ask_command_row(env, standin.url, proc_env))
            rows.extend(
                _task_rows(client, daemon.pid, psutil, AgentSpec, 4 if env.smoke else TASKS)
            )
        finally:
            daemon.terminate()
            daemon.wait(60)
            log.close()
    rows.extend(_embedded_memory_rows(Path(env.tmp) / f"je{os.getpid()}", real_models))
    return rows


def _tree_rss(psutil, pid: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """RSS in MB of the daemon itself, and of its worker processes together."""
    proc = psutil.Process(pid)
    workers = sum(c.memory_info().rss for c in proc.children(recursive=True))
    return proc.memory_info().rss / 2**20, workers / 2**20


def _embedded_memory_rows(root: Path, real_models: Path) -> list[Row]:
    """One `ask` on the embedded engine (SmolLM2, the default model) through jarvisd:
    the model is loaded in the ask worker, not the daemon; after `ask_idle_unload`
    seconds idle the worker exits and its memory goes back."""
    import psutil

    from jarvisd._runcontext import RunContext
    from jarvisd.catalog import get_entry, model_file
    from jarvisd.daemon import DaemonHost
    from jarvisd.runs import AgentSpec

    name = "smollm2-135m"
    if not model_file(get_entry(name), real_models).is_file():
        return [Row("jarvisd memory after an embedded `ask`", float("nan"), "MB",
                    notes=f"skipped: {name} not pulled into {real_models}")]  # fmt: skip
    proc_env = _daemon_env(root)
    (root / "data" / "models").symlink_to(real_models, target_is_directory=True)
    (root / "config" / "config.toml").write_text(
        f'[engine]\ndefault = "llamacpp"\n[engine.llamacpp]\nmodel = "{name}"\n'
        "[daemon]\nask_idle_unload = 3.0\n"
    )
    saved = {k: os.environ.get(k) for k in proc_env if k.startswith("JARVIS_")}
    os.environ.update({k: v for k, v in proc_env.items() if k.startswith("JARVIS_")})
    log = open(root / "jarvisd.log", "ab")  # noqa: SIM115 - closed below
    daemon = subprocess.Popen([sys.executable, "-m", "jarvisd.daemon"], env=proc_env,
                              stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        host = DaemonHost(connect_timeout=2.0)
        for _ in range(200):
            try:
                from jarvisd.daemon import Client

                Client(timeout=5).ping()
                break
            except Exception:
                time.sleep(0.05)
        time.sleep(1.0)  # the warm worker has imported what it needs
        idle_daemon, idle_workers = _tree_rss(psutil, daemon.pid)
        outcome = host.run(AgentSpec("Name three primary colors.", max_tokens=32), RunContext())
        after_daemon, after_workers = _tree_rss(psutil, daemon.pid)
        deadline = time.monotonic() + 30
        unloaded_daemon, unloaded_workers = after_daemon, after_workers
        while time.monotonic() < deadline:
            time.sleep(0.5)
            unloaded_daemon, unloaded_workers = _tree_rss(psutil, daemon.pid)
            if unloaded_workers < after_workers / 2:
                break
    finally:
        daemon.terminate()
        daemon.wait(60)
        log.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    answered = outcome.ok and bool(outcome.answer)
    return [
        Row(
            "jarvisd RSS after an `ask` on the embedded model",
            after_daemon,
            "MB",
            baseline=idle_daemon,
            baseline_name="jarvisd before the ask",
            target="the model stays out of the daemon (< +20 MB)",
            passed=answered and after_daemon - idle_daemon < 20,
            notes=f"ask workers {idle_workers:.0f} MB idle -> {after_workers:.0f} MB with "
            f"SmolLM2 loaded; answered: {answered}",
        ),
        Row(
            "ask workers' RSS after the idle unload (ask_idle_unload = 3 s)",
            unloaded_workers,
            "MB",
            baseline=after_workers,
            baseline_name="with the model loaded",
            target="the model's memory goes back",
            passed=unloaded_workers < after_workers / 2,
            notes=f"jarvisd itself {unloaded_daemon:.0f} MB",
        ),
    ]


def _ask_row(env, client, url, Message, OllamaEngine, AgentSpec) -> Row:  # type: ignore[no-untyped-def]
    spec = AgentSpec(input="Name three primary colors.")
    direct_engine = OllamaEngine(url, model="scripted")
    loop = asyncio.new_event_loop()
    messages = [Message.user(spec.input)]

    def via_daemon() -> str:
        for reply in client.ask(spec):
            if hasattr(reply, "result"):
                return str(reply.result["answer"])
        raise AssertionError("no result")

    async def stream() -> str:
        # The same call the agent makes when it streams to a terminal.
        text = ""
        async for chunk in direct_engine.stream(messages):
            text += chunk.delta
        return text

    def direct() -> str:
        return loop.run_until_complete(stream())

    runs = env.runs(40, 8)
    ours: list[float] = []
    base: list[float] = []
    for i in range(runs + 2):  # interleaved A B A B; the first two are warm-up
        for fn, sink in ((via_daemon, ours), (direct, base)):
            start = time.perf_counter()
            assert fn() == "Red, yellow and blue."
            if i >= 2:
                sink.append((time.perf_counter() - start) * 1000)
    loop.run_until_complete(direct_engine.aclose())
    loop.run_until_complete(loop.shutdown_asyncgens())  # what asyncio.run does on exit
    loop.close()
    p50, b50 = percentile(ours, 50), percentile(base, 50)
    return Row(
        "`ask` round trip through jarvisd (p50)",
        p50,
        "ms",
        baseline=b50,
        baseline_name="same engine streamed directly",
        target="<= 50 ms more at p50",
        passed=p50 - b50 <= 50,
        notes=f"+{p50 - b50:.1f} ms at p50; p95 {percentile(ours, 95):.1f} vs "
        f"{percentile(base, 95):.1f} ms; {len(ours)} interleaved runs; socket client, "
        "not counting CLI process start-up",
    )


def _ask_command_row(env: BenchEnv, url: str, proc_env: dict[str, str]) -> Row:
    """The whole `jarvis ask` command, answered by the running daemon, against a Python
    process that calls the same engine with the official ollama client: both are whole
    processes, interleaved."""
    direct = textwrap.dedent(f"""
        import ollama
        r = ollama.Client(host={url!r}, timeout=30).chat(
            model="scripted", messages=[{{"role": "user", "content": "Name three primary colors."}}])
        print(r.message.content)
    """)
    times = time_commands(
        {
            "jarvis": [env.jarvis_bin(), "ask", "Name three primary colors."],
            "direct": [env.python, "-c", direct],
        },
        env.runs(20, 5),
        env.warmups(),
        env=proc_env,
    )
    ours, base = percentile(times["jarvis"], 50) * 1000, percentile(times["direct"], 50) * 1000
    return Row(
        "`jarvis ask` command through jarvisd (p50)",
        ours,
        "ms",
        baseline=base,
        baseline_name="python -c ollama.Client().chat() process",
        target="<= 50 ms more at p50",
        passed=ours - base <= 50,
        notes=f"{ours - base:+.0f} ms at p50; p95 {percentile(times['jarvis'], 95) * 1000:.0f} vs "
        f"{percentile(times['direct'], 95) * 1000:.0f} ms; whole processes, interleaved",
    )


def _task_rows(client, daemon_pid, psutil, AgentSpec, tasks) -> list[Row]:  # type: ignore[no-untyped-def]
    proc = psutil.Process(daemon_pid)
    idle_rss = proc.memory_info().rss / 2**20
    start = time.perf_counter()
    ids = [client.submit(AgentSpec(input=f"task {i}")).id for i in range(tasks)]
    submit_s = time.perf_counter() - start
    queued = client.status().queued
    loaded_rss = proc.memory_info().rss / 2**20
    done = [client.wait(task_id, timeout=600) for task_id in ids]
    total_s = time.perf_counter() - start
    ok = sum(1 for t in done if t.state == "succeeded")
    return [
        Row(
            f"{tasks} tasks submitted at once",
            ok,
            "tasks",
            target=f"all {tasks} succeed",
            passed=ok == tasks,
            notes=f"all done in {total_s:.1f} s with max_concurrent=2 "
            f"({total_s / tasks * 1000:.0f} ms per task: one worker process each)",
        ),
        Row(
            f"jarvisd memory with {queued} queued tasks",
            loaded_rss,
            "MB",
            baseline=idle_rss,
            baseline_name="idle jarvisd",
            notes="RSS of the daemon process (workers are separate processes)",
            passed=queued >= min(100, tasks // 2) and loaded_rss < 200,
            target=">= 100 queued, < 200 MB",
        ),
        Row(
            "task submissions per second",
            tasks / submit_s,
            "tasks/s",
            notes="one connection per submission; each stored (SQLite WAL) before the reply",
        ),
    ]
