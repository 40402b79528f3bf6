"""The web console in a real browser: Playwright drives Debian's ``chromium`` (no browser
download) against a real jarvisd answering from a scripted engine. One browser and one
daemon for the whole module (the CI budget); each test is a scenario a person runs, or
an attack that must fail.

``JARVIS_UI_SCREENSHOTS=DIR`` saves a screenshot of each page there (the README's)."""

from __future__ import annotations

import http.client
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

from jarvisd._messages import Generation, Message, Role, ToolSpec
from jarvisd._paths import ENV_VARS
from jarvisd.daemon import Client
from jarvisd.engines import ScriptedEngine, reply
from jarvisd.runs import AgentSpec
from jarvisd.testing import OllamaStandIn
from tests.conftest import IN_CI, require
from tests.daemon.conftest import owned_by

pytestmark = [pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
HOSTILE = ('<script>alert("s")</script><img src=x onerror=alert("i")>'
           '<a href="javascript:alert(\'j\')">link</a> \x1b[31mred\x1b[0m')  # fmt: skip
#: File names a project may hold: as HTML they would be markup.
HOSTILE_FILES = ("<img src=x onerror=alert(7)>.txt", "javascript:alert(8)", "<svg onload=alert(9)>")
#: Where `setup.sh --test` installed the external agents (before any test moves paths).
AGENTS_DIR = Path(os.environ.get("JARVIS_AGENTS_DIR") or Path.home() / ".cache/jarvis/agents")
SLEEP_CELL = "```python\nimport time\ntime.sleep(600)\n```"


def script(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Generation:
    first = next((m.content for m in messages if m.role is Role.USER), "")
    last = messages[-1]
    if "sleep in the sandbox" in first:
        return reply(SLEEP_CELL)
    if last.role is Role.TOOL:
        return reply(f"done: {last.content}")
    if "use calc" in first and tools:
        return reply("", ("calculator", {"expression": "2+2"}))
    if "hostile" in first:
        return reply(HOSTILE)
    return reply(f"answer to {first}")


class Module:
    """The module's daemon, its directories and its login."""

    def __init__(self, root: Path, standin: str) -> None:
        self.root = root
        self.env = {var: str(root / key) for key, var in ENV_VARS.items()}
        self.env["JARVIS_AGENTS_DIR"] = str(AGENTS_DIR)
        for key in ENV_VARS:
            (root / key).mkdir(mode=0o700 if key == "runtime" else 0o777)
        self.socket = root / "runtime" / "jarvisd.sock"
        agent = f'["{sys.executable}", "-m", "jarvisd.testing.acp_agent", "work"]'
        (root / "config" / "config.toml").write_text(
            f'[engine]\ndefault = "ollama"\nmodel = "scripted"\n'
            f'[engine.ollama]\nhost = "{standin}"\n[daemon]\nmax_concurrent = 3\n'
            '[ui]\nport = 0\n[sandbox]\nmemory = "256m"\n'
            '[agents]\napproval_timeout = 600\n[agents.permissions]\nedit = "ask"\n'
            f"[agents.external.work]\ncommand = {agent}\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = ""

    def start(self) -> None:
        env = {**os.environ, **self.env}
        env.pop("JARVIS_CONFIG", None)
        with open(self.root / "jarvisd.log", "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "jarvisd.daemon", "--log-level",
                                          "INFO"], stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log()
            try:
                self.login_url()
                return
            except Exception:
                time.sleep(0.1)
        raise AssertionError(f"jarvisd did not answer:\n{self.log()}")

    def client(self) -> Client:
        return Client(self.socket, timeout=60)

    def login_url(self) -> str:
        url = self.client().ui_login()
        self.base = url.split("/login", 1)[0]
        return url

    def log(self) -> str:
        return (self.root / "jarvisd.log").read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Module]:
    with OllamaStandIn(ScriptedEngine(fallback=script)) as standin:
        module = Module(tmp_path_factory.mktemp("ui"), standin.url)
        module.start()
        yield module
        module.stop()


@pytest.fixture(autouse=True)
def _module_dirs(daemon: Module, monkeypatch: pytest.MonkeyPatch) -> None:
    """This test process sees the daemon's directories (its code store, its socket)."""
    for var, value in daemon.env.items():
        monkeypatch.setenv(var, value)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require(os.path.exists(CHROMIUM), "Debian's chromium is not installed "
            "(packaging/dev/setup.sh --test installs it)")  # fmt: skip
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require(False, "playwright is not installed (pip install -e '.[dev]')")
        raise
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


class Watched:
    """A logged-in page, with every dialog it opened and every request it made."""

    def __init__(self, browser: Any, daemon: Module) -> None:
        self.context = browser.new_context(viewport={"width": 1100, "height": 720})
        self.page = self.context.new_page()
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.set_default_timeout(60_000)
        self.page.goto(daemon.login_url())
        self.base = daemon.base

    def go(self, path: str) -> Any:
        self.page.goto(self.base + path)
        return self.page

    def foreign_requests(self) -> list[str]:
        return [u for u in self.requests if not u.startswith(self.base + "/")]

    def shot(self, name: str) -> None:
        where = os.environ.get("JARVIS_UI_SCREENSHOTS")
        if where:
            Path(where).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(where) / f"{name}.png"))

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def web(browser: Any, daemon: Module) -> Iterator[Watched]:
    watched = Watched(browser, daemon)
    yield watched
    watched.close()


def wait_state(daemon: Module, task_id: str, *states: str, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        info = daemon.client().show(task_id)
        if info.state in states:
            return info
        assert time.monotonic() < deadline, f"{task_id} is {info.state}:\n{daemon.log()}"
        time.sleep(0.1)


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def expect_state(page: Any, state: str) -> None:
    """The state the page shows, as the stream updates it (no string evaluated: the
    console's CSP forbids eval, and Playwright's string predicates use it)."""
    expect(page.locator("#state")).to_have_text(state, timeout=90_000)


# -- scenarios ----------------------------------------------------------------------


def test_submit_then_events_stream_in_and_the_trace_is_drawn(web: Watched, daemon: Module) -> None:
    page = web.go("/tasks")
    assert page.title() == "Tasks - jarvis"
    page.fill("textarea[name=input]", "use calc on 2+2")
    page.fill("form.submit input[name=agent]", "orchestrator")
    page.fill("input[name=tools]", "calculator")
    page.click("#submit")
    page.wait_for_load_state()
    assert "/tasks/" in page.url, page.content()
    task_id = page.url.rsplit("/", 1)[1]
    # Streamed: the page was loaded before the task ran; nothing reloads it.
    page.locator("#events li.ev-tool_call_start").first.wait_for()
    expect_state(page, "succeeded")
    assert "done: 4" in page.inner_text("#answer")
    kinds = page.locator("#events .kind").all_inner_texts()
    assert "tool_call_end" in kinds and kinds.count("tool_call_start") == 1, kinds
    web.shot("task")
    page = web.go("/tasks")
    assert page.locator(f'tr[data-id="{task_id}"]').count() == 1
    web.shot("tasks")
    # The trace page draws its diagram on the server: the SVG is in the DOM.
    page = web.go(f"/traces/{task_id}")
    svg = page.locator("svg.sequence")
    svg.wait_for()
    assert "tool calculator" in (svg.text_content() or "")
    web.shot("trace")
    assert web.dialogs == [] and web.foreign_requests() == []


def test_approve_a_waiting_permission_then_the_task_finishes(
    web: Watched, daemon: Module, tmp_path: Path
) -> None:
    (tmp_path / "README.md").write_text("MARKER\n")
    spec = AgentSpec(input="go", agent="work", isolation="host",
                     options={"workspace": str(tmp_path)})  # fmt: skip
    task_id = daemon.client().submit(spec).id
    # Two more tabs, loaded before the answer: what they show next can only have come
    # through their event streams (a marker on each window proves no reload).
    task_tab, list_tab = web.context.new_page(), web.context.new_page()
    task_tab.goto(f"{web.base}/tasks/{task_id}")
    task_tab.locator(".waiting").wait_for()
    list_tab.goto(f"{web.base}/tasks")
    row = list_tab.locator(f'tr[data-id="{task_id}"] td:nth-child(2)')
    expect(row).to_have_text("waiting")
    for tab in (task_tab, list_tab):
        tab.evaluate("() => { window.marker = 1; }")
    page = web.go(f"/tasks/{task_id}")
    page.locator(".waiting button.ok").wait_for()
    assert "write out.txt" in page.inner_text(".waiting")
    assert not (tmp_path / "out.txt").exists()
    page.click(".waiting button.ok")
    expect_state(page, "succeeded")
    assert (tmp_path / "out.txt").read_text() == "written by the agent\n"
    assert "edit: allowed" in page.inner_text("#answer")
    expect_state(task_tab, "succeeded")
    task_tab.locator("#events li.ev-approval").wait_for()
    assert "edit: allowed" in task_tab.inner_text("#answer")
    expect(row).to_have_text("succeeded", timeout=30_000)
    assert task_tab.evaluate("window.marker") == 1 and list_tab.evaluate("window.marker") == 1


def _workspace(project: Path, files: dict[str, str]) -> Any:
    from jarvisd._paths import paths
    from jarvisd.code import CodeStore, prepare
    from jarvisd.code._workspace import snapshot

    store = CodeStore(paths().state / "code.db")
    ws = prepare(str(project), store=store, state_dir=paths().state, task="fix add")
    for name, text in files.items():
        (Path(ws.path) / name).write_text(text)
    change = snapshot(ws)
    outcome = {"result": change.result, "diff": change.diff, "summary": HOSTILE,
               "files": [{"status": s, "path": p} for s, p in change.files],
               "test_before": {"command": "pytest", "passed": False, "output": "1 failed"},
               "test_after": {"command": "pytest", "passed": True, "output": "2 passed"}}  # fmt: skip
    return store.update(ws, state="done", outcome=outcome)


def _project(root: Path) -> Path:
    from tests.code.conftest import git

    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return root


def test_review_a_diff_and_apply_it_then_discard_another(
    web: Watched, daemon: Module, tmp_path: Path
) -> None:
    project = _project(tmp_path / "p")
    files = {"calc.py": "def add(a, b):\n    return a + b\n"}
    files.update({name: f"{name}\n" for name in HOSTILE_FILES})
    ws = _workspace(project, files)
    # Made from the same commit: once ``ws`` is applied, its change conflicts.
    other = _workspace(project, {"calc.py": "def add(a, b):\n    return 0\n"})
    page = web.go(f"/code/{ws.id}")
    assert "+    return a + b" in page.inner_text("pre.diff")
    page.click("#view-toggle")  # htmx fetches the split view into #diff
    page.locator("#diff table.diff.split").wait_for()
    for name in HOSTILE_FILES:
        assert name in page.inner_text("ul.files")
    _assert_inert(web)
    web.shot("code")
    page.click("button.ok")  # apply
    page.wait_for_url(f"**/code/{ws.id}?applied=*")
    assert (project / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert page.inner_text("#ws-state") == "applied"
    page = web.go("/code")
    web.shot("code-list")

    page = web.go(f"/code/{other.id}")
    page.click("button.ok")  # apply: it conflicts with the change applied above
    assert "not applied" in page.inner_text("#note")
    assert (project / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    page = web.go(f"/code/{other.id}")
    page.click("button.danger")  # discard
    page.wait_for_url("**/code")
    assert not Path(other.path).exists()
    assert f"/code/{other.id}" not in page.content()
    assert (project / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_cancel_a_running_sandboxed_task_leaves_no_container(web: Watched, daemon: Module) -> None:
    from tests.sandbox.conftest import engine_problem

    problem = engine_problem()
    require(not problem, problem)
    page = web.go("/tasks")
    page.fill("textarea[name=input]", "sleep in the sandbox")
    page.fill("form.submit input[name=agent]", "native_openhands")
    page.check("input[name=sandbox]")
    page.click("#submit")
    page.wait_for_url("**/tasks/*")
    task_id = page.url.rsplit("/", 1)[1]
    info = wait_state(daemon, task_id, "running")
    pids: set[int] = set()
    deadline = time.monotonic() + 120
    while not owned_by(pids):
        info = daemon.client().show(task_id)
        assert info.state == "running" and time.monotonic() < deadline, daemon.log()
        if info.worker_pid:
            with_children = psutil.Process(info.worker_pid).children(recursive=True)
            pids |= {info.worker_pid, *(p.pid for p in with_children)}
        time.sleep(0.2)
    page = web.go("/tasks")
    page.click(f'tr[data-id="{task_id}"] button.danger')
    page.wait_for_url(f"**/tasks/{task_id}")
    wait_state(daemon, task_id, "cancelled")
    deadline = time.monotonic() + 60
    while owned_by(pids):
        assert time.monotonic() < deadline, "the cancelled task's container is still there"
        time.sleep(0.5)


def test_models_and_benchmarks_pages_and_an_agent_install(web: Watched) -> None:
    from jarvisd.external import BUILTIN, installed

    page = web.go("/models")
    assert "default model" in page.inner_text("main")
    web.shot("models")
    require(installed(BUILTIN["opencode"]), f"opencode is not installed in {AGENTS_DIR} "
            "(packaging/dev/setup.sh --test installs it)")  # fmt: skip
    page.click("form[action='/models/agents/opencode/install'] button")
    page.wait_for_url("**/models/agents/opencode")
    expect(page.locator("#status")).to_have_text("done", timeout=90_000)
    assert "opencode: already installed" in page.inner_text("#progress")
    page = web.go("/benchmarks")
    assert page.locator("svg.chart").count() >= 1
    web.shot("benchmarks")
    assert web.dialogs == [] and web.foreign_requests() == []


# -- attacks ------------------------------------------------------------------------


def _assert_inert(web: Watched) -> None:
    """What a model or a project wrote is text: no element made of it, nothing ran."""
    page = web.page
    page.wait_for_timeout(300)  # an image's onerror would have fired by now
    assert page.locator("main script, main img, main svg:not(.sequence):not(.chart)").count() == 0
    assert page.locator("a[href^='javascript']").count() == 0
    assert web.dialogs == [], web.dialogs
    assert web.foreign_requests() == [], web.foreign_requests()


def test_a_hostile_answer_is_shown_as_text(web: Watched, daemon: Module) -> None:
    page = web.go("/tasks")
    page.fill("textarea[name=input]", "hostile answer please")
    page.click("#submit")
    page.wait_for_url("**/tasks/*")
    expect_state(page, "succeeded")
    answer = page.inner_text("#answer")
    assert '<script>alert("s")</script>' in answer and "javascript:alert" in answer
    assert "\\x1b[31m" in answer  # the terminal escape, made visible
    _assert_inert(web)
    web.go(page.url.replace(web.base, ""))  # rendered at load, not streamed
    _assert_inert(web)


def test_the_csp_stops_inline_script_even_if_markup_got_in(web: Watched) -> None:
    page = web.go("/tasks")
    page.evaluate("""() => { document.querySelector('main').insertAdjacentHTML('beforeend',
        '<img src="/static/none" onerror="window.ran = 1">'); }""")
    page.wait_for_timeout(500)
    assert page.evaluate("window.ran") is None


def _raw(daemon: Module, method: str, path: str, headers: dict[str, str],
         body: str = "") -> tuple[int, str]:  # fmt: skip
    host, port = daemon.base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body.encode() or None,
                     headers={"content-type": "application/x-www-form-urlencoded", **headers})  # fmt: skip
        reply = conn.getresponse()
        return reply.status, reply.read().decode(errors="replace")
    finally:
        conn.close()


def _session(web: Watched) -> tuple[str, str]:
    """The page's cookie and CSRF token, as a script in the browser cannot see them."""
    cookie = next(c for c in web.context.cookies() if c["name"] == "jarvis_ui")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    csrf = web.go("/tasks").get_attribute("meta[name=csrf]", "content")
    return f"jarvis_ui={cookie['value']}", csrf


def test_refused_without_csrf_cookie_or_with_a_foreign_host_or_origin(
    web: Watched, daemon: Module, tmp_path: Path
) -> None:
    cookie, csrf = _session(web)
    assert web.page.evaluate("document.cookie") == ""  # HttpOnly
    spec = AgentSpec(input="go", agent="work", isolation="host",
                     options={"workspace": str(tmp_path)})  # fmt: skip
    (tmp_path / "README.md").write_text("x\n")
    task_id = daemon.client().submit(spec).id  # waits for approval: cancellable
    wait_state(daemon, task_id, "running")
    cancel = f"/tasks/{task_id}/cancel"
    own = {"cookie": cookie, "host": daemon.base.removeprefix("http://")}

    status, text = _raw(daemon, "POST", cancel, own, "")
    assert status == 403 and "CSRF" in text
    status, _ = _raw(daemon, "POST", cancel, own, "csrf=" + "0" * 64)
    assert status == 403
    status, _ = _raw(daemon, "POST", cancel, {"host": own["host"]}, f"csrf={csrf}")
    assert status == 401
    status, _ = _raw(daemon, "GET", "/tasks", {"host": own["host"]})
    assert status == 401
    for host in ("evil.example", "evil.example:80", "127.0.0.1.nip.io"):
        status, _ = _raw(daemon, "GET", "/tasks", {**own, "host": host})
        assert status == 403, host
    for origin in ("http://evil.example", "http://127.0.0.1:1", "null"):
        status, _ = _raw(daemon, "POST", cancel, {**own, "origin": origin}, f"csrf={csrf}")
        assert status == 403, origin
    assert daemon.client().show(task_id).state == "running"
    # A used login URL is spent.
    url = daemon.login_url()
    assert _raw(daemon, "GET", url.removeprefix(daemon.base), own)[0] == 303
    assert _raw(daemon, "GET", url.removeprefix(daemon.base), own)[0] == 401
    # With all of them, the same POST works.
    status, _ = _raw(daemon, "POST", cancel, {**own, "origin": daemon.base}, f"csrf={csrf}")
    assert status == 303
    wait_state(daemon, task_id, "cancelled")


def test_jarvis_ui_no_open_prints_a_login_url(daemon: Module) -> None:
    done = subprocess.run([sys.executable, "-m", "jarvisd", "ui", "--no-open"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **daemon.env})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(daemon.base + "/login?token="), done.stdout
    url = done.stdout.strip()
    assert _raw(daemon, "GET", url.removeprefix(daemon.base), {"host": "127.0.0.1"})[0] == 303


def test_ci_has_the_browser() -> None:
    if IN_CI:
        assert os.path.exists(CHROMIUM), "packaging/dev/setup.sh --test installs chromium"
