"""`jarvis daemon install` and the packaged shell completions."""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from jarvisd._errors import UsageError
from jarvisd.cli import _daemon as daemon_cli
from jarvisd.cli import cli
from jarvisd.cli._completion import SHELLS, completion_script
from jarvisd.cli._daemon import install_unit

JARVIS = str(Path(sys.executable).parent / "jarvis")


def test_install_unit_writes_the_systemd_unit_and_the_launchd_agent(tmp_path: Path) -> None:
    unit, how = install_unit("linux", home=tmp_path)
    assert unit == tmp_path / ".config" / "systemd" / "user" / "jarvisd.service"
    lines = unit.read_text().splitlines()
    exec_start = [line.split("=", 1)[1] for line in lines if line.startswith("ExecStart=")]
    assert len(exec_start) == 1 and os.access(exec_start[0], os.X_OK), exec_start
    assert Path(exec_start[0]).name == "jarvisd"
    assert "[Install]" in lines and "WantedBy=default.target" in lines
    assert "systemctl --user enable --now jarvisd" in how

    agent, how = install_unit("darwin", home=tmp_path)
    assert agent == tmp_path / "Library" / "LaunchAgents" / "dev.jarvis.jarvisd.plist"
    plist = plistlib.loads(agent.read_bytes())
    assert plist["Label"] == "dev.jarvis.jarvisd"
    assert plist["ProgramArguments"] == exec_start
    assert how == f"launchctl load -w {agent}"

    with pytest.raises(UsageError, match="linux and macOS only"):
        install_unit("win32", home=tmp_path)


@pytest.mark.parametrize("booted", [True, False])
def test_install_says_what_to_do_with_or_without_systemd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, booted: bool
) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("systemd is Linux only")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(daemon_cli, "systemd_running", lambda: booted)
    result = CliRunner().invoke(cli, ["daemon", "install"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / ".config" / "systemd" / "user" / "jarvisd.service").is_file()
    if booted:
        assert "systemctl --user daemon-reload" in result.output
    else:
        assert "systemd is not running here (PID 1 is " in result.output
        assert "jarvis daemon start" in result.output
        assert "systemctl" not in result.output


@pytest.mark.parametrize("shell", SHELLS)
def test_packaged_completion_is_what_jarvis_prints(shell: str) -> None:
    packaged = daemon_cli._packaging_dir() / "completions" / f"jarvis.{shell}"
    assert packaged.read_text() == completion_script(shell) + "\n"


@pytest.mark.parametrize(
    ("shell", "words", "cword", "expected"),
    [
        ("bash", "jarvis task s", "2", "plain,show\nplain,submit\n"),
        ("zsh", "jarvis daemon re", "2", "plain\nrestart\nStop jarvisd (if it runs) and start"),
        ("fish", "jarvis task w", "w", "plain,wait\tWait for a task to end"),
    ],
)
def test_completion_answers(shell: str, words: str, cword: str, expected: str) -> None:
    env = dict(os.environ, COMP_WORDS=words, COMP_CWORD=cword,
               _JARVIS_COMPLETE=f"{shell}_complete")  # fmt: skip
    out = subprocess.run([JARVIS], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(expected), out.stdout


def test_bash_completion_script_completes_in_bash() -> None:
    bash = shutil.which("bash")
    assert bash is not None
    script = daemon_cli._packaging_dir() / "completions" / "jarvis.bash"
    probe = (
        f'PATH="{Path(JARVIS).parent}:$PATH"; source "{script}"; '
        "COMP_WORDS=(jarvis daemon st); COMP_CWORD=2; _jarvis_completion jarvis; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    out = subprocess.run([bash, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["start", "status", "stop"], out
