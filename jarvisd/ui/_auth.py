"""Who may use the console: one-time login tokens, session cookies, CSRF tokens.

``jarvis ui`` asks the daemon (over its private Unix socket, so only this user can)
for a login URL holding a one-time token. Redeeming it sets an HttpOnly,
SameSite=Strict session cookie; every POST must also carry the session's CSRF token
(an HMAC of the session id), so a page that makes the browser send the cookie still
cannot act. Everything is bounded: at most ``MAX_TOKENS`` unredeemed tokens and
``MAX_SESSIONS`` sessions (the oldest go), tokens expire after ``TOKEN_TTL`` seconds.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict

__all__ = ["COOKIE", "Sessions"]

COOKIE = "jarvis_ui"
TOKEN_TTL = 300.0
MAX_TOKENS = 16
MAX_SESSIONS = 32


class Sessions:
    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self._tokens: OrderedDict[str, float] = OrderedDict()  # token -> expiry
        self._sessions: OrderedDict[str, float] = OrderedDict()  # id -> created

    def mint(self) -> str:
        """A new one-time login token."""
        token = secrets.token_urlsafe(32)
        self._tokens[token] = time.monotonic() + TOKEN_TTL
        while len(self._tokens) > MAX_TOKENS:
            self._tokens.popitem(last=False)
        return token

    def redeem(self, token: str) -> str | None:
        """The new session's id for a valid, unused token (which is then spent)."""
        expiry = self._tokens.pop(token, None) if len(token) < 100 else None
        if expiry is None or expiry < time.monotonic():
            return None
        session = secrets.token_urlsafe(32)
        self._sessions[session] = time.time()
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return session

    def valid(self, session: str | None) -> bool:
        return bool(session) and session in self._sessions

    def csrf(self, session: str) -> str:
        return hmac.new(self._key, session.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session: str, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf(session), str(token))
