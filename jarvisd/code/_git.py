"""Running git on the host for ``jarvis code``, so that nothing it reads can become a
command.

A workspace comes back from the sandbox written by a program jarvis does not trust, and
the project and the user's own git config may name commands (a filter driver such as
``nbstripout --install`` writes, ``diff.*.command``, ``core.fsmonitor``...) that git
would run with agent-written files as input or with the workspace as its working
directory. So host-side git:

- reads no config but the private repository's own (jarvis wrote it) and the ``-c``
  settings below: no system or global config (``GIT_CONFIG_NOSYSTEM``,
  ``GIT_CONFIG_GLOBAL=/dev/null``, ``HOME`` an empty directory), nothing from the
  caller's ``GIT_*`` environment;
- reads no attributes: no system or global attributes file, and never a work tree: the
  repository jarvis records a workspace in is bare, and files reach it through
  ``_record`` (jarvis reads them, git only stores what it is handed);
- takes every path as a literal path (``GIT_LITERAL_PATHSPECS``: a file named ``:/x``
  is that file), and diffs as text with no external diff or textconv.

Only reading the user's project itself (its HEAD, the list of its files) runs git in the
project; with the settings above nothing there runs a command either.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .._errors import WorkspaceError

__all__ = ["EMPTY_TREE", "IDENTITY", "Git", "git_output", "safe_environment"]

#: The empty tree (sha1): where attributes are read from when a git version would
#: otherwise read them from HEAD of a bare repository (``attr.tree``, git 2.43 on).
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
#: Settings forced on every call, above any config git may still read (see above).
_SAFE = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "tag.gpgSign=false",
    "-c",
    "diff.external=",
    "-c",
    "submodule.recurse=false",
    "-c",
    "core.attributesFile=/dev/null",
    "-c",
    f"attr.tree={EMPTY_TREE}",
    "-c",
    "core.sshCommand=false",
    "-c",
    "core.pager=cat",
    "-c",
    "core.askPass=false",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "log.showSignature=false",
    "-c",
    "protocol.allow=never",
    "-c",
    "core.editor=false",
    "--no-pager",
)
#: How much of git's error output a message quotes.
_STDERR_CHARS = 400
#: Identity of the commits jarvis makes on its own branch.
IDENTITY = {
    "GIT_AUTHOR_NAME": "jarvis code",
    "GIT_AUTHOR_EMAIL": "jarvis@localhost",
    "GIT_COMMITTER_NAME": "jarvis code",
    "GIT_COMMITTER_EMAIL": "jarvis@localhost",
}
#: The caller's variables git or a program it could start reads config or commands from.
_DROPPED = ("HOME", "XDG_CONFIG_HOME", "PAGER", "EDITOR", "VISUAL", "SSH_ASKPASS")


def safe_environment(home: str, extra: Mapping[str, str] = {}) -> dict[str, str]:
    """The environment of a host-side git: the caller's, less every ``GIT_*`` variable
    and what names config or commands, with config and attributes switched off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k not in _DROPPED}
    env.update(
        LC_ALL="C",
        HOME=home,
        XDG_CONFIG_HOME=home,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_ATTR_NOSYSTEM="1",
        GIT_LITERAL_PATHSPECS="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_OPTIONAL_LOCKS="0",
        GIT_PAGER="cat",
        GIT_NO_REPLACE_OBJECTS="1",
        GIT_ASKPASS="false",
        GIT_EDITOR="false",
        GIT_PROTOCOL_FROM_USER="0",
        GIT_CONFIG_COUNT="0",
    )
    env.update(extra)
    return env


@contextmanager
def _empty_home() -> Iterator[str]:
    """A fresh, empty, private directory for ``HOME`` (nothing there to read)."""
    with tempfile.TemporaryDirectory(prefix="jarvis-git-home-") as home:
        yield home


def argv(args: Sequence[str]) -> list[str]:
    return ["git", *_SAFE, *args]


def git_output(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """``git ARGS`` with the safe settings; WorkspaceError (git's words) when it fails
    and ``check``, or when git is not installed."""
    try:
        with _empty_home() as home:
            done = subprocess.run(
                argv(args),
                cwd=cwd,
                env=safe_environment(home, env or {}),
                input=stdin,
                capture_output=True,
                check=False,
            )
    except FileNotFoundError as exc:
        raise WorkspaceError("git is not installed (jarvis code needs it)") from exc
    if check and done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip()[-_STDERR_CHARS:]
        command = next((a for i, a in enumerate(args) if i == 0 or args[i - 1] != "-c"), "")
        raise WorkspaceError(f"git {command} failed: {said or f'exit {done.returncode}'}")
    return done


@dataclass(frozen=True, slots=True)
class Git:
    """One repository (``git_dir``), used without a work tree: git never reads a
    workspace's files itself (see the module docstring)."""

    git_dir: Path

    def env(self, extra: Mapping[str, str] = {}) -> dict[str, str]:
        return {"GIT_DIR": str(self.git_dir), **extra}

    def run(
        self,
        *args: str,
        index: Path | None = None,
        stdin: bytes | None = None,
        check: bool = True,
        identity: bool = False,
    ) -> bytes:
        extra = {"GIT_INDEX_FILE": str(index)} if index is not None else {}
        if identity:
            extra.update(IDENTITY)
        # cwd: the repository, never a workspace (nothing found there can matter).
        done = git_output(args, cwd=self.git_dir, env=self.env(extra), stdin=stdin, check=check)
        return done.stdout

    def head(self, *args: str, limit: int) -> tuple[bytes, bool]:
        """The first ``limit`` bytes of ``git ARGS``'s output, and whether there was
        more (git is stopped then: a diff may be as large as what the agent wrote)."""
        with (
            _empty_home() as home,
            subprocess.Popen(
                argv(args),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=safe_environment(home, self.env()),
                cwd=self.git_dir,
            ) as proc,
        ):
            assert proc.stdout is not None
            data = proc.stdout.read(limit + 1)
            proc.kill()
        return data[:limit], len(data) > limit

    def text(self, *args: str, **kw: object) -> str:
        return self.run(*args, **kw).decode("utf-8", "replace").strip()  # type: ignore[arg-type]
