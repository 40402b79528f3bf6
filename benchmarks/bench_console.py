"""The web console (``jarvis ui``) in Debian's chromium, driven by Playwright, against a
real jarvisd (scripted engine behind a real Ollama-protocol server):

* the tasks page with 1,000 tasks stored (the newest 200 listed, ``?page=N`` for the
  rest): from ``goto`` to the browser's load event (server time, transfer and the
  browser's parse), target <= 300 ms at p50;
* an event from the store to the DOM: a task waits for approval with its page open;
  once approved, each event the worker stores (its ``timestamp``) is timed again when
  a MutationObserver sees it in ``#events`` (same machine, same clock), target <= 100 ms
  at p50.

    python -m benchmarks.bench_console [--quick] [--out DIR]

writes ``DIR/console.md`` and ``DIR/console.json`` (default ``benchmarks/results``);
the harness runs it among the others.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.harness import ROOT, BenchEnv, Row, percentile, render_markdown
from jarvisd.ui._app import PAGE

TASKS = 1000
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
_OBSERVE = """() => {
  window.seen = {};
  new MutationObserver((records) => {
    const now = performance.timeOrigin + performance.now();
    for (const r of records) for (const n of r.addedNodes)
      if (n.dataset && n.dataset.seq && !(n.dataset.seq in window.seen)) window.seen[n.dataset.seq] = now;
  }).observe(document.getElementById('events'), {childList: true});
}"""


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("config", "data", "cache", "state", "runtime"):
        (root / key).mkdir(parents=True, exist_ok=True, mode=0o700)
        env[f"JARVIS_{key.upper()}_DIR"] = str(root / key)
    env.pop("JARVIS_CONFIG", None)
    return env


def _fill(database: Path, count: int) -> None:
    """``count`` finished tasks, written before the daemon starts (it would run queued ones)."""
    from jarvisd.daemon._store import TaskStore
    from jarvisd.runs import AgentSpec

    store = TaskStore(database)
    store.open()
    try:
        for i in range(count):
            info = store.create(AgentSpec(input=f"task {i}: <b>not bold</b>", agent="simple"))
            store.finish(info.id, "succeeded", "", {"answer": f"answer {i}"})
    finally:
        store.close()


def measure(env: BenchEnv) -> list[Row]:
    if not os.path.exists(CHROMIUM):
        return [
            Row("console", float("nan"), "", notes="skipped: Debian's chromium is not installed")
        ]
    from playwright.sync_api import expect, sync_playwright

    from jarvisd.daemon import Client
    from jarvisd.engines import ScriptedEngine, reply
    from jarvisd.runs import AgentSpec
    from jarvisd.testing import OllamaStandIn

    root = Path(env.tmp) / f"console-{os.getpid()}"
    shutil.rmtree(root, ignore_errors=True)
    environ = _env(root)
    tasks = 20 if env.smoke else TASKS
    _fill(root / "state" / "jarvisd.db", tasks)
    agent = f'["{sys.executable}", "-m", "jarvisd.testing.acp_agent", "work"]'
    workspace = root / "project"
    workspace.mkdir()
    (workspace / "README.md").write_text("MARKER\n")
    loads, latencies = [], []
    with OllamaStandIn(ScriptedEngine(fallback=lambda m, t: reply("ok"))) as standin:
        (root / "config" / "config.toml").write_text(
            f'[engine]\ndefault = "ollama"\nmodel = "scripted"\n[engine.ollama]\nhost = "{standin.url}"\n'
            '[ui]\nport = 0\n[agents]\napproval_timeout = 600\n[agents.permissions]\nedit = "ask"\n'
            f"[agents.external.work]\ncommand = {agent}\n"
        )
        log = root / "jarvisd.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "jarvisd.daemon"], stdout=out,
                                    stderr=subprocess.STDOUT, env=environ, start_new_session=True)  # fmt: skip
        client = Client(root / "runtime" / "jarvisd.sock", timeout=60)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    url = client.ui_login()
                    break
                except Exception:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError(log.read_text()[-2000:]) from None
                    time.sleep(0.1)
            base = url.split("/login", 1)[0]
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = browser.new_page()
                page.goto(url)
                for _ in range(env.warmups()):
                    page.goto(base + "/tasks")
                for _ in range(env.runs(15, 5)):
                    began = time.perf_counter()
                    page.goto(base + "/tasks", wait_until="load")
                    loads.append(time.perf_counter() - began)
                assert page.locator("#rows tr").count() == min(tasks, PAGE)
                if tasks > PAGE:  # the oldest are a page further on
                    page.click("#older")
                    assert page.locator("#rows tr").count() == min(tasks - PAGE, PAGE)
                for _ in range(env.runs(10, 3)):
                    spec = AgentSpec(input="go", agent="work", isolation="host",
                                     options={"workspace": str(workspace)})  # fmt: skip
                    task_id = client.submit(spec).id
                    page.goto(f"{base}/tasks/{task_id}")
                    page.locator(".waiting button.ok").wait_for(timeout=60_000)
                    page.evaluate(_OBSERVE)
                    client.answer(task_id, True)
                    expect(page.locator("#state")).to_have_text("succeeded", timeout=60_000)
                    page.wait_for_timeout(200)
                    seen: dict[str, float] = page.evaluate("window.seen")
                    for event in client.logs(task_id):
                        if str(event.seq) in seen:
                            latencies.append(seen[str(event.seq)] / 1000 - event.timestamp)
                browser.close()
        finally:
            proc.terminate()
            proc.wait(30)
    load_p50 = percentile(loads, 50)
    event_p50 = percentile(latencies, 50)
    return [
        Row(f"console: tasks page, {tasks} tasks stored ({min(tasks, PAGE)} a page), goto to load",
            load_p50 * 1000, "ms",
            target="<= 300 ms (p50)", passed=None if env.smoke else load_p50 <= 0.3,
            notes=f"{len(loads)} loads in chromium via Playwright",
            extra={"p90_ms": percentile(loads, 90) * 1000}),
        Row("console: an event from the store to the DOM (SSE)", event_p50 * 1000, "ms",
            target="<= 100 ms (p50)", passed=None if env.smoke else event_p50 <= 0.1,
            notes=f"{len(latencies)} events after an approval",
            extra={"p90_ms": percentile(latencies, 90) * 1000}),
    ]  # fmt: skip


def run(env: BenchEnv) -> list[Row]:
    return measure(env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "tmp"
    tmp.mkdir(exist_ok=True)
    rows = measure(BenchEnv(sys.executable, tmp, quick=args.quick))
    shutil.rmtree(tmp, ignore_errors=True)
    meta = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    (out / "console.md").write_text(render_markdown(rows, meta))
    (out / "console.json").write_text(
        json.dumps({"meta": meta, "rows": [asdict(r) | {"ratio": r.ratio} for r in rows]}, indent=2)
    )
    print((out / "console.md").read_text())
    return 0 if all(r.passed is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
