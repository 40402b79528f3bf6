"""The console's parts without a browser or a daemon: escaping, the SVG, sessions and
tokens, the admission rules, the vendored file's pin, the config keys and the wire op."""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path

import pytest

from jarvisd._config import parse_config
from jarvisd._errors import ConfigError
from jarvisd.daemon._protocol import UiLogin, encode, parse_request
from jarvisd.http._server import Request
from jarvisd.ui import CSP, Console, _auth
from jarvisd.ui._html import esc
from jarvisd.ui._pages import diff_html
from jarvisd.ui._svg import bars, sequence

STATIC = Path(__file__).resolve().parents[2] / "jarvisd" / "ui" / "static"


def test_the_vendored_htmx_is_the_pinned_file() -> None:
    pins = re.findall(r"\| (\S+) \| .*? \| ([0-9a-f]{64}) \|", (STATIC / "VENDORED.md").read_text())
    assert pins, "VENDORED.md lists no file"
    for name, digest in pins:
        assert hashlib.sha256((STATIC / name).read_bytes()).hexdigest() == digest, name
    # Nothing in the page loads from elsewhere.
    for path in STATIC.glob("*.js"):
        if path.name != "htmx-2.0.4.min.js":
            assert "http" not in path.read_text(), path


def test_esc_makes_markup_and_terminal_escapes_text() -> None:
    out = esc("<script>x</script><img src=x onerror=\"a()\"> \x1b[31m\x07 'q'")
    assert "<" not in out and '"' not in out and "'" not in out
    assert "\\x1b[31m" in out and "\\x07" in out
    assert esc("a" * 50, limit=10).startswith("a" * 10 + " [cut")


def test_diff_lines_are_escaped_in_both_views() -> None:
    diff = "--- a/<x>\n+++ b/<x>\n@@ -1 +1 @@\n-<script>a()</script>\n+<img onerror=b()>\n ctx\n"
    for view in ("unified", "split"):
        out = diff_html(diff, view)
        assert "<script" not in out and "<img" not in out
        assert "&lt;img onerror=b()&gt;" in out


def test_the_sequence_svg_escapes_what_the_trace_holds() -> None:
    svg = sequence(
        "sequenceDiagram\n    participant p0 as user\n    participant p1 as <script>x\n"
        "    p0->>p1: <img src=x onerror=y()>\n    p1-->>p0: done\n    Note over p1: </svg>\n"
    )
    assert svg.count("<svg") == 1 and svg.count("</svg>") == 1
    assert "<script" not in svg and "<img" not in svg
    assert svg.count('class="msg"') == 2
    chart = bars("<b>", [("<i>", 1.0, "ms", True), ("x", 2.0, "<u>", None)])
    assert "<b>" not in chart and "<i>" not in chart and "<u>" not in chart


def test_a_login_token_works_once_and_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = _auth.Sessions()
    token = sessions.mint()
    session = sessions.redeem(token)
    assert session is not None and sessions.valid(session)
    assert sessions.redeem(token) is None  # spent
    assert not sessions.valid("made-up") and not sessions.valid(None)
    assert sessions.csrf_ok(session, sessions.csrf(session))
    assert not sessions.csrf_ok(session, "0" * 64) and not sessions.csrf_ok(session, None)
    late = sessions.mint()
    monkeypatch.setattr(_auth, "TOKEN_TTL", -1.0)
    expired = sessions.mint()
    assert sessions.redeem(expired) is None
    assert sessions.redeem(late) is not None
    # Bounded: old tokens go when many are minted.
    first = sessions.mint()
    for _ in range(_auth.MAX_TOKENS):
        sessions.mint()
    assert sessions.redeem(first) is None


def _request(path: str = "/tasks", method: str = "GET", **headers: str) -> Request:
    return Request(method, path, {}, {k.replace("_", "-"): v for k, v in headers.items()})


def test_admission_host_origin_cookie() -> None:
    console = Console(daemon=None)
    console.port = 8765
    session = console.sessions.redeem(console.sessions.mint())
    cookie = f"{_auth.COOKIE}={session}"
    own = {"host": "127.0.0.1:8765", "cookie": cookie}
    assert console.admit(_request(**own)) is None
    assert console.admit(_request(**{**own, "host": "localhost:8765"})) is None
    assert console.admit(_request(**{**own, "origin": "http://127.0.0.1:8765"})) is None
    refused = {
        "no host": _request(cookie=cookie),
        "foreign host": _request(**{**own, "host": "evil.example"}),
        "rebinding": _request(**{**own, "host": "127.0.0.1.evil.example:8765"}),
        "foreign origin": _request(**{**own, "origin": "http://evil.example"}),
        "another local port": _request(**{**own, "origin": "http://127.0.0.1:9999"}),
        "null origin": _request(**{**own, "origin": "null"}),
        "no cookie": _request(host=own["host"]),
        "a made-up cookie": _request(host=own["host"], cookie=f"{_auth.COOKIE}=x"),
        "a broken cookie": _request(host=own["host"], cookie='a="'),
    }
    for why, request in refused.items():
        reply = console.admit(request)
        assert reply is not None and reply.status in (400, 401, 403), why
        assert ("content-security-policy", CSP) in reply.headers, why
    # The login page and the vendored files need no session; they still need our Host.
    assert console.admit(_request("/static/console.js", host=own["host"])) is None
    assert console.admit(_request("/login", host="evil.example")) is not None
    big = _request("/tasks", "POST", **own, content_length=str(10 * 1024 * 1024))
    assert console.admit(big).status == 413  # type: ignore[union-attr]


def test_a_post_without_the_csrf_token_is_refused() -> None:
    console = Console(daemon=None)  # refused before the daemon is asked anything
    session = console.sessions.redeem(console.sessions.mint())
    assert session is not None
    headers = {"host": "127.0.0.1", "cookie": f"{_auth.COOKIE}={session}"}
    for body in (
        b"",
        b"csrf=",
        b"csrf=" + b"0" * 64,
        b"csrf=" + console.sessions.csrf("x").encode(),
    ):
        reply = asyncio.run(console.handle(Request("POST", "/tasks/abc/cancel", {}, headers, body)))
        assert reply.status == 403, body


def test_the_login_sets_an_httponly_strict_cookie() -> None:
    console = Console(daemon=None)
    token = console.sessions.mint()
    reply = asyncio.run(console.handle(Request("GET", "/login", {"token": token}, {})))
    assert reply.status == 303
    cookie = dict(reply.headers)["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    again = asyncio.run(console.handle(Request("GET", "/login", {"token": token}, {})))
    assert again.status == 401


def test_ui_config_and_the_login_op() -> None:
    assert parse_config({}).ui.enabled is True
    config = parse_config({"ui": {"enabled": False, "port": 0}})
    assert (config.ui.enabled, config.ui.port) == (False, 0)
    with pytest.raises(ConfigError):
        parse_config({"ui": {"port": 70000}})
    assert isinstance(parse_request(encode(UiLogin(id="1"))), UiLogin)


def test_events_of_note_get_their_own_look_and_stay_text() -> None:
    from jarvisd.ui._pages import event_html

    gauge = event_html(3, "budget_warning", {"dimension": "tokens", "used": 80, "limit": 100}, 0)
    assert '<meter min="0" max="100" value="80">' in gauge
    net = event_html(4, "net_connect", {"host": "<b>x", "port": 443, "allowed": False}, 0)
    assert "REFUSED" in net and "&lt;b&gt;x:443" in net
    odd = event_html(5, "<i>", {"k": "<script>"}, 0)
    assert "<i>" not in odd and "<script>" not in odd


def test_an_install_keeps_a_bounded_tail_of_its_output() -> None:
    import sys

    from jarvisd.ui import _installs

    install = _installs.Install("x")
    script = "import sys; [print('line', i) for i in range(2000)]; sys.stdout.write('y' * 100000)"
    asyncio.run(install.run([sys.executable, "-c", script]))
    assert install.returncode == 0
    assert len(install.lines) == _installs.MAX_LINES
    assert all(len(line) <= _installs.MAX_LINE for line in install.lines)
    lines, count = install.since(0)  # the oldest are gone; the newest are kept
    assert count == install.count and lines[-1] == "y" * _installs.MAX_LINE
    assert install.since(count) == ([], count)
