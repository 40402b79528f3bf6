"""What a JSON-RPC 2.0 message must be for ``jarvis acp`` to take it (standard library
only: ``jarvisd.acp._stdio`` checks the first message before asyncio loads)."""

from __future__ import annotations

__all__ = ["INVALID_REQUEST", "MAX_METHOD_CHARS", "PARSE_ERROR", "check_message"]

#: The longest method name accepted.
MAX_METHOD_CHARS = 200

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


def _valid_id(value: object) -> bool:
    # Strings and integers only (JSON-RPC discourages fractions; a list or an object
    # as an id is not hashable, and would break the connection's table of replies).
    return (
        value is None
        or isinstance(value, str)
        or (isinstance(value, int) and not isinstance(value, bool))
    )


def check_message(message: object) -> tuple[str, object] | None:
    """Why ``message`` (a parsed JSON value) is not a JSON-RPC 2.0 message jarvis
    takes, with the id to reply to; None when it is one."""
    if not isinstance(message, dict):
        return "a message must be a JSON object", None
    raw_id = message.get("id")
    reply_id = (
        raw_id
        if _valid_id(raw_id) and (not isinstance(raw_id, str) or len(raw_id) <= 200)
        else None
    )
    if message.get("jsonrpc") != "2.0":
        return 'a message must have "jsonrpc": "2.0"', reply_id
    if "id" in message and reply_id is None and raw_id is not None:
        return "an id must be a string (at most 200 characters) or an integer", None
    if "method" in message:
        method = message["method"]
        if not isinstance(method, str) or not method or len(method) > MAX_METHOD_CHARS:
            return "a method must be a non-empty string", reply_id
        params = message.get("params")
        if params is not None and not isinstance(params, dict | list):
            return "params must be an object or an array", reply_id
        return None
    if "id" not in message or raw_id is None:
        return "a message needs a method, or an id with a result or an error", None
    if ("result" in message) == ("error" in message):
        return "a response has exactly one of result and error", reply_id
    return None
