"""The console as an ``App`` of the package's h11 server (``jarvisd.http``),
served by jarvisd itself on a loopback port, next to its Unix socket.

Every request passes :meth:`Console.admit` before its body is read:

* **Host** must be a loopback name or address (DNS rebinding), and must be sent;
* **Origin**, when sent, must be this console's own origin (another local page, even on
  another port, is another origin: SameSite cookies do not tell ports apart);
* the **session cookie** must name a live session (except the login URL and the
  vendored static files); a POST body is at most ``MAX_FORM`` bytes.

Then every POST must carry the session's **CSRF token**. Every reply carries a strict
Content-Security-Policy: our own scripts and styles only, no inline script, no
third-party request, no framing.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, urlencode

from jarvisd._errors import JarvisError, TaskNotFound, UsageError
from jarvisd.http import Allowlist, Request, Response

from . import _pages
from ._auth import COOKIE, Sessions
from ._html import button_form, esc, page, when
from ._installs import Install, Installs
from ._svg import sequence

if TYPE_CHECKING:
    from jarvisd.code import CodeStore, Workspace
    from jarvisd.code._candidates import Ranked
    from jarvisd.daemon._protocol import TaskInfo
    from jarvisd.daemon._server import Daemon

__all__ = ["CSP", "Console"]

log = logging.getLogger(__name__)
_N = TypeVar("_N", int, float)

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = [
    ("content-security-policy", CSP),
    ("x-content-type-options", "nosniff"),
    # "no-referrer" would make the browser send "Origin: null" on our own form posts.
    ("referrer-policy", "same-origin"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
]
MAX_FORM = 256 * 1024
#: How often the tasks page's stream looks for changes (a state change is not an event).
TASKS_POLL_S = 1.0
#: A comment line on a quiet stream, so a dead client is noticed.
KEEPALIVE_S = 15.0
#: Tasks a page lists (``?page=N`` for older ones): a browser takes longer to lay out
#: 1,000 rows than the server takes to make them.
PAGE = 200
MAX_PAGE = 10_000
_STATIC = Path(__file__).with_name("static")
_TYPES = {".js": "text/javascript", ".css": "text/css", ".md": "text/plain; charset=utf-8"}
_HTML = "text/html; charset=utf-8"


def _reply(
    status: int,
    body: bytes | str,
    content_type: str = _HTML,
    headers: list[tuple[str, str]] | None = None,
) -> Response:
    data = body.encode() if isinstance(body, str) else body
    extra = headers or []
    names = {name for name, _ in extra}  # a header given here replaces the default one
    return Response(
        status, data, content_type, headers=[*(h for h in _HEADERS if h[0] not in names), *extra]
    )


def _error(status: int, message: str) -> Response:
    return _reply(
        status,
        page(
            "Refused" if status < 500 else "Error", f'<p class="bad" id="error">{esc(message)}</p>'
        ),
    )


def _install_status(install: Install) -> str:
    if not install.done:
        return "running"
    return "done" if install.returncode == 0 else f"failed (exit {install.returncode})"


def _sse(event: str, html: str, event_id: int | None = None) -> bytes:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines += [f"data: {line}" for line in html.split("\n")]
    return ("\n".join(lines) + "\n\n").encode()


class Console:
    """The console for ``daemon`` (a :class:`jarvisd.daemon._server.Daemon`)."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.sessions = Sessions()
        self.allow = Allowlist.for_server("127.0.0.1")
        self.port = 0
        self.installs = Installs()

    # -- who may ask --------------------------------------------------------------------

    @property
    def origins(self) -> frozenset[str]:
        return frozenset(
            {
                f"http://127.0.0.1:{self.port}",
                f"http://localhost:{self.port}",
                f"http://[::1]:{self.port}",
            }
        )

    def login_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/login?token={self.sessions.mint()}"

    def _session(self, request: Request) -> str | None:
        raw = request.headers.get("cookie")
        if not raw:
            return None
        try:
            morsel = SimpleCookie(raw).get(COOKIE)
        except CookieError:
            return None
        return morsel.value if morsel is not None else None

    def admit(self, request: Request) -> Response | None:
        host = request.headers.get("host")
        if host is None:
            return _error(400, "a Host header is required")
        refusal = self.allow.host_refusal(host)
        if refusal is not None:
            return _error(403, refusal)
        origin = request.headers.get("origin")
        if origin is not None and origin.strip().lower().rstrip("/") not in self.origins:
            return _error(403, f"origin {origin!r} is not this console's")
        if request.path.startswith("/static/") or request.path in ("/login", "/favicon.ico"):
            return None
        if not self.sessions.valid(self._session(request)):
            return _error(401, "no console session: open the URL that `jarvis ui` prints")
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_FORM:
            return _error(413, f"a form may be at most {MAX_FORM} bytes")
        return None

    def refuse(self, request: Request | None, status: int, message: str) -> Response:
        return _error(status, message)

    # -- routing ------------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        try:
            return await self._route(request)
        except TaskNotFound as exc:
            return _error(404, str(exc))
        except JarvisError as exc:
            return _error(400, str(exc))
        except Exception:
            log.exception("console request %s %s failed", request.method, request.path)
            return _error(500, "the console failed to answer (see the daemon's log)")

    async def _route(self, request: Request) -> Response:
        path, method = request.path.rstrip("/") or "/", request.method
        parts = path.strip("/").split("/")
        if path.startswith("/static/"):
            return self._static(path[len("/static/") :])
        if path == "/login":
            return self._login(request)
        if path == "/favicon.ico":
            return _reply(404, b"", "text/plain")
        session = self._session(request) or ""
        csrf = self.sessions.csrf(session)
        form: dict[str, str] = {}
        if method == "POST":
            if len(request.body) > MAX_FORM:
                return _error(413, f"a form may be at most {MAX_FORM} bytes")
            form = dict(parse_qsl(request.body.decode("utf-8", "replace"), keep_blank_values=True))
            if not self.sessions.csrf_ok(session, form.get("csrf")):
                return _error(403, "the form's CSRF token is missing or wrong: reload the page")
        elif method != "GET":
            return _error(405, f"method {method} is not allowed")
        head = parts[0]
        if path == "/":
            return self._redirect("/tasks")
        if head == "tasks":
            return await self._tasks(request, parts[1:], form, csrf)
        if head == "code":
            return await self._code(request, parts[1:], csrf)
        if head == "traces" and len(parts) == 2 and method == "GET":
            return self._trace(parts[1])
        if path == "/models" and method == "GET":
            return await asyncio.to_thread(self._models, csrf)
        if head == "models" and len(parts) >= 3 and parts[1] == "agents":
            return self._agent_install(request, parts[2], parts[3:], csrf)
        if path == "/benchmarks" and method == "GET":
            return await asyncio.to_thread(self._benchmarks)
        return _error(404, f"no page {path}")

    def _redirect(self, to: str, headers: list[tuple[str, str]] | None = None) -> Response:
        return _reply(303, b"", headers=[("location", to), *(headers or [])])

    def _static(self, name: str) -> Response:
        path = _STATIC / name
        if "/" in name or name.startswith(".") or not path.is_file():
            return _error(404, "no such file")
        return _reply(
            200,
            path.read_bytes(),
            _TYPES.get(path.suffix, "application/octet-stream"),
            headers=[("cache-control", "max-age=3600")],
        )

    def _login(self, request: Request) -> Response:
        session = self.sessions.redeem(request.query.get("token", ""))
        if session is None:
            return _error(401, "this login link is used or expired: run `jarvis ui` again")
        cookie = f"{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/"
        return self._redirect("/tasks", [("set-cookie", cookie)])

    # -- tasks --------------------------------------------------------------------------

    def _list(self, state: str, agent: str, page_no: int = 1) -> list[_pages.Row]:
        """A page of tasks, newest first, light (no spec decoded); a running one says
        whether it waits for an approval (which only the task manager knows)."""
        store, tasks = self.daemon.store, self.daemon.tasks
        states = [state] if state in _pages.STATES else []
        rows = []
        offset = (page_no - 1) * PAGE
        for t in store.summaries(states, agent or None, PAGE, offset):
            waiting = t.state == "running" and tasks.live(store.get(t.id)).waiting is not None
            rows.append(_pages.Row(t.id, t.state, t.agent, t.created_at, t.input, waiting))
        return rows

    async def _tasks(
        self, request: Request, rest: list[str], form: dict[str, str], csrf: str
    ) -> Response:
        tasks = self.daemon.tasks
        state, agent = request.query.get("state", ""), request.query.get("agent", "")
        raw_page = request.query.get("page", "1")
        page_no = int(raw_page) if raw_page.isdigit() and 0 < int(raw_page) <= MAX_PAGE else 1
        query = {"state": state, "agent": agent, "page": str(page_no)}
        if not rest:
            if request.method == "POST":
                info = self._submit(form)
                return self._redirect(f"/tasks/{info.id}")
            found = self._list(state, agent, page_no)
            pages = []
            if page_no > 1:
                newer = urlencode({**query, "page": str(page_no - 1)})
                pages.append(f'<a href="/tasks?{esc(newer)}" id="newer">newer</a>')
            if len(found) == PAGE:
                older = urlencode({**query, "page": str(page_no + 1)})
                pages.append(f'<a href="/tasks?{esc(older)}" id="older">older</a>')
            pager = f'<p class="pages">page {page_no} {" ".join(pages)}</p>'
            body = _pages.tasks_body(found, csrf, state, agent, pager)
            stream = "/tasks/stream?" + urlencode(query)
            return _reply(200, page("Tasks", body, csrf=csrf, sse=stream))
        if rest == ["stream"]:
            return Response(
                200,
                content_type="text/event-stream",
                headers=list(_HEADERS),
                stream=self._tasks_stream(state, agent, page_no, csrf),
            )
        task_id = self.daemon.store.resolve(rest[0])
        action = rest[1] if len(rest) > 1 else ""
        if request.method == "POST":
            if action == "cancel":
                await tasks.cancel(task_id)
                self.daemon.watcher.remove(task_id)
            elif action in ("approve", "deny"):
                tasks.answer(task_id, action == "approve")
            else:
                return _error(404, f"no action {action!r}")
            return self._redirect(f"/tasks/{task_id}")
        if action == "stream":
            since = request.headers.get("last-event-id", "0")
            start = int(since) if since.isdigit() else 0
            return Response(
                200,
                content_type="text/event-stream",
                headers=list(_HEADERS),
                stream=self._task_stream(task_id, start, csrf),
            )
        if action:
            return _error(404, f"no page {request.path}")
        info = tasks.show(task_id)
        events = self.daemon.store.events(task_id, 0, 1000)
        body = _pages.task_body(info, events, csrf)
        last = events[-1].seq if events else 0
        return _reply(
            200,
            page(f"Task {task_id}", body, csrf=csrf, sse=f"/tasks/{task_id}/stream?since={last}"),
        )

    def _submit(self, form: dict[str, str]) -> TaskInfo:
        from jarvisd.runs import AgentSpec, validate_spec

        text = form.get("input", "")
        if not text.strip():
            raise UsageError("the task text is empty")

        def number(name: str, kind: type[_N]) -> _N | None:
            raw = form.get(name, "").strip()
            if not raw:
                return None
            try:
                value = kind(raw)
            except ValueError:
                raise UsageError(f"{name} must be a number, not {raw[:40]!r}") from None
            if value <= 0:
                raise UsageError(f"{name} must be more than 0")
            return value

        spec = AgentSpec(
            input=text,
            agent=form.get("agent", "").strip(),
            tools=tuple(t.strip() for t in form.get("tools", "").split(",") if t.strip()),
            isolation="sandbox" if form.get("sandbox") == "1" else "default",
            max_tokens_total=number("max_tokens_total", int),
            max_tool_calls=number("max_tool_calls", int),
            max_wall=number("max_wall", float),
            team=form.get("team", "").strip() or None,
        )
        validate_spec(spec, self.daemon.config)
        return self.daemon.tasks.submit(spec)

    async def _tasks_stream(
        self, state: str, agent: str, page_no: int, csrf: str
    ) -> AsyncIterator[bytes]:
        """The rows again whenever a listed task changes state (polled: a state change
        is a store write, not an event anyone waits on)."""
        seen = ""
        quiet = 0.0
        while True:
            # On the loop, as every use of the task store and manager (a light query).
            found = self._list(state, agent, page_no)
            digest = hashlib.sha256(
                repr([(t.id, t.state, t.waiting) for t in found]).encode()
            ).hexdigest()
            if digest != seen:
                if seen:
                    yield _sse("rows", _pages.task_rows(found, csrf))
                seen, quiet = digest, 0.0
            elif quiet >= KEEPALIVE_S:
                yield b": alive\n\n"
                quiet = 0.0
            await asyncio.sleep(TASKS_POLL_S)
            quiet += TASKS_POLL_S

    async def _task_stream(self, task_id: str, since: int, csrf: str) -> AsyncIterator[bytes]:
        """Each new event as it is stored (woken by the task manager, not polled), and
        the status block whenever the task's state or its question changes."""
        store, tasks = self.daemon.store, self.daemon.tasks
        shown = ""
        while True:
            changed = tasks.changed(task_id)
            events = store.events(task_id, since, 200)
            for e in events:
                since = e.seq
                yield _sse("ev", _pages.event_html(e.seq, e.event, e.data, e.timestamp), e.seq)
            info = tasks.show(task_id) if not events else store.get(task_id)
            status = _pages.status_html(tasks.live(info), csrf)
            if status != shown:
                shown = status
                yield _sse("state", status)
            if events:
                continue
            if info.finished:
                yield _sse("end", "")
                return
            try:
                await asyncio.wait_for(changed.wait(), 1.0)
            except TimeoutError:
                yield b": alive\n\n"

    # -- code ---------------------------------------------------------------------------

    def _code_store(self) -> CodeStore:
        from jarvisd._paths import paths
        from jarvisd.code import CodeStore

        return CodeStore(paths().state / "code.db")

    async def _code(self, request: Request, rest: list[str], csrf: str) -> Response:
        return await asyncio.to_thread(self._code_sync, request, rest, csrf)

    def _code_sync(self, request: Request, rest: list[str], csrf: str) -> Response:
        from jarvisd._paths import paths

        store = self._code_store()
        try:
            if not rest:
                if request.method != "GET":
                    return _error(405, "nothing to post here")
                rows = (
                    "".join(
                        f'<tr><td><a href="/code/{esc(ws.id)}">{esc(ws.id)}</a></td>'
                        f"<td>{esc(ws.shown_state)}</td><td>{when(ws.created_at)}</td>"
                        f"<td>{len(ws.outcome.get('files') or ())}</td><td>{esc(ws.source)}</td>"
                        f"<td>{esc(ws.group or '')}</td><td>{esc(ws.task, 80)}</td></tr>"
                        for ws in store.list(200)
                    )
                    or '<tr><td colspan="7">no workspaces</td></tr>'
                )
                body = (
                    '<table class="code"><tr><th>id</th><th>state</th><th>created</th>'
                    "<th>files</th><th>project</th><th>group</th><th>task</th></tr>"
                    f"{rows}</table>"
                )
                return _reply(200, page("Code", body, csrf=csrf))
            ws = store.get(rest[0])
            action = rest[1] if len(rest) > 1 else ""
            view = "split" if request.query.get("view") == "split" else "unified"
            if request.method == "POST":
                return self._code_action(store, ws, action, paths().state, csrf)
            if action == "diff":
                return _reply(200, _pages.diff_html(str(ws.outcome.get("diff") or ""), view))
            if action:
                return _error(404, f"no page {request.path}")
            body = _pages.workspace_body(ws, self._ranking(store, ws), csrf, view)
            return _reply(200, page(f"Workspace {ws.id}", body, csrf=csrf, htmx=True))
        finally:
            store.close()

    def _ranking(self, store: CodeStore, ws: Workspace) -> list[Ranked]:
        if not ws.group:
            return []
        from jarvisd.code._candidates import group_of, rank

        return list(rank(group_of(store, ws)))

    def _code_action(
        self, store: CodeStore, ws: Workspace, action: str, state_dir: Path, csrf: str
    ) -> Response:
        from jarvisd.code import apply, discard

        if action == "apply":
            try:
                done = apply(ws.id, store, state_dir)
            except JarvisError as exc:  # conflicts: the project is as it was
                body = _pages.workspace_body(
                    ws, self._ranking(store, ws), csrf, "unified", note=f"not applied: {exc}"
                )
                return _reply(409, page(f"Workspace {ws.id}", body, csrf=csrf, htmx=True))
            files = done.outcome.get("files") or []
            return self._redirect(f"/code/{ws.id}?applied={len(files)}")
        if action == "discard":
            if ws.shown_state == "running":
                return _error(409, f"workspace {ws.id} is running: cancel its task first")
            discard(ws, store, state_dir)
            return self._redirect("/code")
        return _error(404, f"no action {action!r}")

    # -- traces, models, benchmarks -----------------------------------------------------

    def _trace(self, ref: str) -> Response:
        from jarvisd.traces import to_mermaid

        events: list[dict[str, Any]] = []
        title = ref
        try:
            task_id = self.daemon.store.resolve(ref)
            events = [
                {"type": e.event, "data": e.data}
                for e in self.daemon.store.events(task_id, 0, 5000)
            ]
            title, top = f"task {task_id}", "agent"
        except TaskNotFound:
            from jarvisd.traces import TraceStore

            try:
                trace = TraceStore().get(ref)
            except JarvisError as exc:
                return _error(404, str(exc))
            events, top, title = list(trace.events), trace.agent, f"trace {trace.id}"
        svg = sequence(to_mermaid(events, top))
        return _reply(200, page(f"Trace of {title}", f'<div class="diagram">{svg}</div>'))

    def _installable(self) -> dict[str, str]:
        """Agents `jarvis agents install` knows: name -> whether installed."""
        from jarvisd.agents._installers import INSTALLERS
        from jarvisd.external import BUILTIN, installed

        found = {
            name: "installed" if installed(agent) else "not installed"
            for name, agent in BUILTIN.items()
        }
        found.update({name: "installed on first use" for name in INSTALLERS})
        return found

    def _agent_install(self, request: Request, name: str, rest: list[str], csrf: str) -> Response:
        from jarvisd.agents._installers import INSTALLERS
        from jarvisd.external import BUILTIN

        if name not in BUILTIN and name not in INSTALLERS:
            return _error(404, f"{name!r} is not an installable agent")
        if request.method == "POST":
            if rest != ["install"]:
                return _error(404, f"no action {'/'.join(rest)!r}")
            self.installs.start(name)
            return self._redirect(f"/models/agents/{name}")
        install = self.installs.runs.get(name)
        if rest == ["stream"]:
            if install is None:
                return _error(404, f"no install of {name} was started here")
            return Response(
                200,
                content_type="text/event-stream",
                headers=list(_HEADERS),
                stream=self._install_stream(install),
            )
        if rest:
            return _error(404, f"no page {request.path}")
        if install is None:
            body = button_form(f"/models/agents/{name}/install", "install", csrf, cls="ok")
            return _reply(200, page(f"Agent {name}", body, csrf=csrf))
        body = f'<p id="status">{_install_status(install)}</p><pre id="progress"></pre>'
        return _reply(
            200, page(f"Installing {name}", body, csrf=csrf, sse=f"/models/agents/{name}/stream")
        )

    async def _install_stream(self, install: Install) -> AsyncIterator[bytes]:
        index = 0
        while True:
            changed = install.changed()
            lines, index = install.since(index)
            if lines:
                yield _sse("line", "".join(f"{esc(line)}\n" for line in lines))
            if install.done:
                yield _sse("state", _install_status(install))
                yield _sse("end", "")
                return
            try:
                await asyncio.wait_for(changed.wait(), KEEPALIVE_S)
            except TimeoutError:
                yield b": alive\n\n"

    def _models(self, csrf: str) -> Response:
        body = _pages.models(self.daemon.config, self._installable(), csrf)
        return _reply(200, page("Models and agents", body))

    def _benchmarks(self) -> Response:
        results = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
        return _reply(200, page("Benchmarks", _pages.benchmarks(results)))
