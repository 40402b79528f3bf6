"""The corpus of the codefix yardstick, read from ``corpus.toml`` (data, not code).

A project is a PyPI sdist pinned by version and sha256, with the command that runs
its whole test suite and the paths its tests live in (which a fix may not change).
A bug is one small mutation of one of its files, ``old`` (which occurs exactly once)
becoming ``new``, and the test functions it makes fail: all of them, and only them.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..._errors import UsageError

__all__ = ["Bug", "Corpus", "Project", "load_corpus"]

_SHA256 = re.compile(r"[0-9a-f]{64}")
_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
#: The mutation kinds (SWE-smith's small ones).
KINDS = ("operator", "constant", "condition", "slice")
#: The failing tests the task text names; the rest are counted.
_NAMED = 5


@dataclass(frozen=True, slots=True)
class Project:
    name: str
    version: str
    sdist: str  # the file name on PyPI
    sha256: str
    test: str  # the whole suite, run from the project's root
    test_paths: tuple[str, ...]  # where its tests are: a fix may not change them

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def root(self) -> str:
        """The directory the sdist unpacks to."""
        for suffix in (".tar.gz", ".zip"):
            if self.sdist.endswith(suffix):
                return self.sdist[: -len(suffix)]
        return self.sdist

    def is_test_path(self, path: str) -> bool:
        """Whether ``path`` (relative to the project) is a test file, or a conftest,
        which a fix may not touch."""
        if path.rsplit("/", 1)[-1] == "conftest.py":
            return True
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in self.test_paths)


@dataclass(frozen=True, slots=True)
class Bug:
    id: str
    project: Project
    file: str
    kind: str
    old: str
    new: str
    symptom: str
    fails: tuple[str, ...]  # pytest ids of the test functions it makes fail

    def task(self) -> str:
        """What the agent is told: the failing tests and the symptom, as a bug report
        would say them; never the fix."""
        named = ", ".join(self.fails[:_NAMED])
        more = len(self.fails) - _NAMED
        if more > 0:
            named += f" and {more} more"
        return (
            f"Bug report: {self.symptom}. The tests {named} fail. Fix the bug in the "
            "project's source (not in its tests) so that the whole test suite passes."
        )


@dataclass(frozen=True, slots=True)
class Corpus:
    projects: tuple[Project, ...]
    bugs: tuple[Bug, ...]

    def select(self, spec: str = "", limit: int | None = None) -> list[Bug]:
        """The bugs ``spec`` names (comma-separated ids or id prefixes such as a
        project's name; "" for all), the first ``limit`` of them."""
        chosen: list[Bug] = []
        wanted = [w.strip() for w in spec.split(",") if w.strip()]
        for word in wanted:
            found = [
                b
                for b in self.bugs
                if b.id == word or b.id.startswith(word + "-") or b.project.name == word
            ]
            if not found:
                raise UsageError(
                    f"no bug {word!r} in the codefix corpus (see `jarvis eval code --list`)"
                )
            chosen += [b for b in found if b not in chosen]
        if not wanted:
            chosen = list(self.bugs)
        return chosen if limit is None else _spread(chosen, limit)


def _spread(bugs: Sequence[Bug], limit: int) -> list[Bug]:
    """``limit`` bugs, round robin over the projects (so ``--bugs 8`` covers 8 of them),
    in corpus order within each."""
    by_project: dict[str, list[Bug]] = {}
    for bug in bugs:
        by_project.setdefault(bug.project.name, []).append(bug)
    out: list[Bug] = []
    while len(out) < min(limit, len(bugs)):
        for group in by_project.values():
            if group and len(out) < limit:
                out.append(group.pop(0))
    return out


def _text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise UsageError(f"codefix corpus: {where} needs a non-empty string {key!r}")
    return value


def _parse(data: Mapping[str, Any]) -> Corpus:
    projects: dict[str, Project] = {}
    for entry in data.get("project") or ():
        name = _text(entry, "name", "a project")
        sha = _text(entry, "sha256", name)
        if not _SHA256.fullmatch(sha):
            raise UsageError(f"codefix corpus: {name}: sha256 must be 64 hex digits")
        paths = entry.get("test_paths")
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
            raise UsageError(f"codefix corpus: {name}: test_paths must list paths")
        if name in projects:
            raise UsageError(f"codefix corpus: project {name} twice")
        projects[name] = Project(
            name,
            _text(entry, "version", name),
            _text(entry, "sdist", name),
            sha,
            _text(entry, "test", name),
            tuple(paths),
        )
    bugs: list[Bug] = []
    for entry in data.get("bug") or ():
        bug_id = _text(entry, "id", "a bug")
        if not _ID.fullmatch(bug_id) or any(b.id == bug_id for b in bugs):
            raise UsageError(f"codefix corpus: bug id {bug_id!r} is malformed or repeated")
        project = projects.get(_text(entry, "project", bug_id))
        if project is None:
            raise UsageError(f"codefix corpus: {bug_id}: unknown project")
        kind = _text(entry, "kind", bug_id)
        if kind not in KINDS:
            raise UsageError(f"codefix corpus: {bug_id}: kind is one of {', '.join(KINDS)}")
        fails = entry.get("fails")
        if not isinstance(fails, list) or not fails or not all("::" in str(f) for f in fails):
            raise UsageError(f"codefix corpus: {bug_id}: fails must list pytest ids")
        old, new = _text(entry, "old", bug_id), _text(entry, "new", bug_id)
        if old == new:
            raise UsageError(f"codefix corpus: {bug_id}: the mutation changes nothing")
        file = _text(entry, "file", bug_id)
        if file.startswith("/") or ".." in file.split("/") or project.is_test_path(file):
            raise UsageError(f"codefix corpus: {bug_id}: file must be a source file of the project")
        bugs.append(
            Bug(
                bug_id,
                project,
                file,
                kind,
                old,
                new,
                _text(entry, "symptom", bug_id),
                tuple(str(f) for f in fails),
            )
        )
    return Corpus(tuple(projects.values()), tuple(bugs))


def load_corpus(text: str | None = None) -> Corpus:
    """The corpus shipped with jarvis (or the one ``text`` holds)."""
    if text is None:
        text = resources.files(__package__).joinpath("corpus.toml").read_text("utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"codefix corpus: {exc}") from exc
    return _parse(data)
