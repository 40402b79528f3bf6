"""Blocked names: which path components say "secret", and when such a name is only
source code.

A name like ``token*`` or ``*secret*`` says what a file holds, except in source trees:
the ``mcp`` SDK has ``mcp/server/auth/handlers/token.py``, many packages a
``secrets.py`` or a ``password_hasher.js``. Refusing those would make every such
package unmountable, so a *file* whose name matches only such a name pattern is allowed
when it is a source file (by suffix) AND its first bytes do not look like a key: no PEM
block, no provider token (``sk-``, ``ghp_``, ``AKIA``...), no long high-entropy string.
Directories, key suffixes (``*.pem``), env files and credential stores stay blocked
whatever they hold.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections import Counter
from collections.abc import Sequence

__all__ = [
    "NAME_PATTERNS",
    "SOURCE_SUFFIXES",
    "blocked_component",
    "excusable",
    "looks_like_key",
]

#: Blocked patterns that judge a name by the word it holds: a source file so named is
#: judged by its contents instead (see the module docstring).
NAME_PATTERNS: frozenset[str] = frozenset(
    {
        "*credential*",
        "token*",
        ".token*",
        "*_token*",
        "*-token*",
        "*secret*",
        "*password*",
        "*passwd*",
    }
)

#: Suffixes of source (and compiled Python) files.
SOURCE_SUFFIXES: frozenset[str] = frozenset(
    {
        ".py",
        ".pyi",
        ".pyc",
        ".js",
        ".mjs",
        ".cjs",
        ".ts",
        ".mts",
        ".cts",
        ".tsx",
        ".jsx",
        ".go",
        ".rs",
        ".rb",
        ".java",
        ".kt",
        ".scala",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".cs",
        ".swift",
        ".php",
        ".lua",
        ".vue",
        ".svelte",
    }
)

#: Bytes of a file read to judge it: keys sit near the top of a file that holds one.
CONTENT_BYTES = 64 * 1024

#: What a key looks like, by provider or format.
_KEY_SHAPES = re.compile(
    rb"-----BEGIN [A-Z0-9 ]*(?:PRIVATE KEY|CERTIFICATE|PGP)"
    rb"|\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"
    rb"|\bgh[pousr]_[A-Za-z0-9]{30,}"
    rb"|\bgithub_pat_[A-Za-z0-9_]{30,}"
    rb"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
    rb"|\bxox[abposr]-[A-Za-z0-9-]{10,}"
    rb"|\bAIza[0-9A-Za-z_-]{35}"
    rb"|\bglpat-[A-Za-z0-9_-]{20,}"
)
#: A run of token characters long enough to be a random secret.
_LONG_RUN = re.compile(rb"[A-Za-z0-9+/=_-]{32,}")
#: Bits per character above which such a run is random, not an identifier or hex hash
#: (hex is at most 4 bits per character; English-like identifiers far less).
_ENTROPY_BITS = 4.5


def blocked_component(parts: Sequence[str], patterns: Sequence[str]) -> str | None:
    """The first pattern matching a component (or run of components) of ``parts``,
    case-insensitively, or None. Patterns with a "/" match that many components."""
    lowered = [p.lower() for p in parts]
    for pattern in patterns:
        pieces = pattern.lower().split("/")
        n = len(pieces)
        for i in range(len(lowered) - n + 1):
            if all(fnmatch.fnmatchcase(lowered[i + k], pieces[k]) for k in range(n)):
                return pattern
    return None


def excusable(parts: Sequence[str], patterns: Sequence[str]) -> bool:
    """Whether the only blocked patterns ``parts`` matches are name patterns matching
    its last component, a source file's name: then its contents decide
    (:func:`looks_like_key`), and the caller must check that it is a regular file."""
    if not parts or not _is_source(parts[-1]):
        return False
    strict = [p for p in patterns if p not in NAME_PATTERNS]
    if blocked_component(parts, strict) is not None:
        return False
    names = [p for p in patterns if p in NAME_PATTERNS]
    return blocked_component(parts[:-1], names) is None


def looks_like_key(data: bytes) -> str:
    """Why ``data`` (a file's first bytes) looks like it holds a key ("" when not)."""
    found = _KEY_SHAPES.search(data)
    if found is not None:
        return (
            f"it holds what looks like a key ({found.group(0)[:12].decode('ascii', 'replace')}...)"
        )
    for run in _LONG_RUN.finditer(data):
        token = run.group(0)
        if _entropy(token) >= _ENTROPY_BITS:
            return "it holds a long random-looking string (a key?)"
    return ""


def _is_source(name: str) -> bool:
    lowered = name.lower()
    return any(lowered.endswith(suffix) for suffix in SOURCE_SUFFIXES)


def _entropy(token: bytes) -> float:
    counts = Counter(token)
    total = len(token)
    return -sum(c / total * math.log2(c / total) for c in counts.values())
