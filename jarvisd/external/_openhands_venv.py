"""The openhands agent's own virtual environment: Python >= 3.12 with openhands-sdk and
openhands-tools (pinned), under ``<cache>/venvs/openhands``, created on first use or by
``jarvis agents install openhands``.

It cannot share jarvis's environment: the SDK needs Python 3.12 and pins ``mcp<2``.
The interpreter comes from ``JARVIS_PYTHON312``, else pyenv (``pyenv prefix 3.12``),
else ``python3.12``/``python3.13`` on PATH; with none, :class:`NoPython312` says how to
get one. A venv is complete only once its marker file (the pins) is written last, so
an interrupted install is redone, never half-used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from .._errors import EngineUnavailable, JarvisError
from .._paths import paths

__all__ = ["PINS", "NoPython312", "ensure_venv", "find_python312", "venv_dir", "venv_python"]

PINS = ("openhands-sdk==1.58.0", "openhands-tools==1.58.0")
_MARKER = ".jarvis-pins"
#: Seconds one install may take (the first takes about 3 minutes: 485 MB, litellm).
_INSTALL_TIMEOUT = 1800


class NoPython312(JarvisError):
    """No Python >= 3.12 interpreter was found (exit 3, like a missing engine)."""

    exit_code = EngineUnavailable.exit_code


def venv_dir() -> Path:
    return paths().cache / "venvs" / "openhands"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def is_installed() -> bool:
    marker = venv_dir() / _MARKER
    try:
        return marker.read_text() == "\n".join(PINS) and venv_python().exists()
    except OSError:
        return False


def _version_ok(python: str) -> bool:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(sys.version_info >= (3, 12))"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.stdout.strip() == "True"


def find_python312() -> str:
    """A Python >= 3.12 interpreter, or NoPython312 naming the fixes."""
    tried: list[str] = []
    explicit = os.environ.get("JARVIS_PYTHON312")
    if explicit:
        if _version_ok(explicit):
            return explicit
        raise NoPython312(f"JARVIS_PYTHON312={explicit} is not a Python >= 3.12 interpreter")
    if sys.version_info >= (3, 12):
        return sys.executable
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        for version in ("3.12", "3.13"):
            try:
                out = subprocess.run(
                    [pyenv, "prefix", version],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired):
                continue
            candidate = Path(out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "")
            python = str(candidate / "bin" / "python")
            if out.returncode == 0 and _version_ok(python):
                return python
        tried.append("pyenv (no 3.12 or 3.13 installed)")
    for name in ("python3.12", "python3.13"):
        found = shutil.which(name)
        if found and _version_ok(found):
            return found
    tried.append("python3.12 and python3.13 on PATH")
    raise NoPython312(
        "the openhands agent needs Python >= 3.12, and none was found (tried "
        + ", ".join(["JARVIS_PYTHON312", *tried])
        + "). Install one (e.g. `pyenv install 3.12`, or your system's python3.12 package), "
        "or set JARVIS_PYTHON312 to its path"
    )


def ensure_venv(progress: Callable[[str], None] | None = None) -> Path:
    """The venv's Python, creating the venv first when it is missing or incomplete
    (``progress`` receives one line per step and pip's own lines)."""
    if is_installed():
        return venv_python()
    say = progress or (lambda line: None)
    python = find_python312()
    target = venv_dir()
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    say(f"creating {target} with {python}")
    _run([python, "-m", "venv", str(target)], say)
    say("installing " + " ".join(PINS) + " (about 3 minutes and 485 MB the first time)")
    _run(
        [
            str(venv_python()),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--progress-bar",
            "off",
            *PINS,
        ],
        say,
    )
    (target / _MARKER).write_text("\n".join(PINS))
    say("openhands is installed")
    return venv_python()


def _run(argv: list[str], say: Callable[[str], None]) -> None:
    try:
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
    except OSError as exc:
        raise JarvisError(f"cannot run {argv[0]}: {exc.strerror}") from exc
    tail: list[str] = []
    assert process.stdout is not None
    for line in process.stdout:
        line = line.rstrip()
        if line and not line.startswith("WARNING: Location"):
            say(line[:300])
            tail = [*tail[-4:], line[:300]]
    try:
        code = process.wait(_INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        raise JarvisError(f"{' '.join(argv[:3])} took more than {_INSTALL_TIMEOUT} s") from None
    if code != 0:
        raise JarvisError(
            f"installing the openhands venv failed (exit {code}): " + " | ".join(tail[-3:])
        )
