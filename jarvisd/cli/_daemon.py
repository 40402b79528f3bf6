"""``jarvis daemon``: start, stop, inspect and install jarvisd."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from jarvisd._errors import DaemonError, DaemonUnavailable, UsageError
from jarvisd._procs import pid_alive

if TYPE_CHECKING:
    from jarvisd.daemon import Client

__all__ = ["daemon", "install_unit", "start_daemon", "stop_daemon"]


def _client(timeout: float = 5.0) -> Client:
    from jarvisd.daemon import Client

    return Client(timeout=timeout, connect_timeout=1.0)


def _read_pid(pid_file: Path) -> int | None:
    """The pid in the pid file, read only from a runtime directory that is ours."""
    from jarvisd.daemon._identity import check_private_dir, read_pid_file

    try:
        check_private_dir(pid_file.parent)
    except DaemonUnavailable:
        return None
    return read_pid_file(pid_file)


def start_daemon(wait: float = 15.0) -> int:
    """Start jarvisd detached (own session, output to its log file); returns its pid.
    Refuses when one already answers."""
    import subprocess

    from jarvisd.daemon import DaemonPaths

    dp = DaemonPaths.default()
    try:
        pong = _client(timeout=2.0).ping()
    except DaemonUnavailable:
        pass
    else:
        raise DaemonError(f"jarvisd is already running (pid {pong.pid}) on {dp.socket}")
    pid = _read_pid(dp.pid_file)
    if pid is not None and not pid_alive(pid):
        dp.pid_file.unlink(missing_ok=True)  # stale: its daemon died without cleaning up
    dp.log_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(dp.log_file, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jarvisd.daemon"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # detached: survives the terminal
            close_fds=True,
            cwd="/",
        )
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            tail = _tail(dp.log_file)
            raise DaemonError(
                f"jarvisd exited at start with code {code}; log {dp.log_file}:\n{tail}"
            )
        try:
            return int(_client(timeout=2.0).ping().pid)
        except DaemonUnavailable:
            time.sleep(0.05)
    raise DaemonError(f"jarvisd did not answer within {wait:g} s; see {dp.log_file}")


def stop_daemon(timeout: float = 30.0) -> int | None:
    """Ask jarvisd to stop and wait until it has; returns its pid (None: none ran)."""
    from jarvisd.daemon import DaemonPaths

    dp = DaemonPaths.default()
    try:
        pid = int(_client().ping().pid)
        _client().shutdown()
    except DaemonUnavailable:
        import signal

        from jarvisd.daemon._identity import signal_daemon

        stale = _read_pid(dp.pid_file)
        # Alive but not answering: the signal path, only to a jarvisd of ours.
        if stale is None or not signal_daemon(stale, signal.SIGTERM, dp.pid_file):
            return None
        pid = stale
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid) and not dp.socket.exists():
            return pid
        time.sleep(0.05)
    raise DaemonError(f"jarvisd (pid {pid}) did not stop within {timeout:g} s")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def _human_duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h {minutes}m"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


# -- service units --------------------------------------------------------------------


def _packaging_dir() -> Path:
    import jarvisd

    here = Path(jarvisd.__file__).resolve().parent
    for candidate in (here / "_packaging", here.parent / "packaging"):
        if candidate.is_dir():
            return candidate
    raise UsageError("the packaging/ files are not installed with this copy of jarvis")


def _jarvisd_bin() -> str:
    """The ``jarvisd`` executable of this installation (beside this Python, else on PATH)."""
    import shutil

    beside = Path(sys.executable).parent / "jarvisd"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("jarvisd")
    if found is None:
        raise UsageError(
            f"no jarvisd executable beside {sys.executable} or on PATH: install jarvis "
            "(pip install jarvisd) so the service has something to run"
        )
    return str(Path(found).resolve())


def systemd_running() -> bool:
    """Is systemd the init system here? (sd_booted(3): /run/systemd/system exists.)"""
    return Path("/run/systemd/system").is_dir()


def _init_name() -> str:
    try:
        return Path("/proc/1/comm").read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def install_unit(platform: str | None = None, home: Path | None = None) -> tuple[Path, str]:
    """Write the systemd user unit (Linux) or launchd agent (macOS) that runs this
    jarvisd; returns where it went and how to enable it."""
    platform = platform or sys.platform
    home = home or Path.home()
    if not (platform.startswith("linux") or platform == "darwin"):
        raise UsageError(f"no service unit for platform {platform!r} (linux and macOS only)")
    jarvisd_bin = _jarvisd_bin()
    src = _packaging_dir()
    if platform.startswith("linux"):
        text = (src / "systemd" / "jarvisd.service").read_text()
        lines = [
            f"ExecStart={jarvisd_bin}" if line.startswith("ExecStart=") else line
            for line in text.splitlines()
        ]
        dest = home / ".config" / "systemd" / "user" / "jarvisd.service"
        how = (
            "systemctl --user daemon-reload && systemctl --user enable --now jarvisd\n"
            "(to keep it running after logout: loginctl enable-linger $USER)"
        )
        content = "\n".join(lines) + "\n"
    else:  # darwin: the only other platform let through above
        text = (src / "launchd" / "dev.jarvis.jarvisd.plist").read_text()
        content = text.replace("/usr/local/bin/jarvisd", jarvisd_bin)
        dest = home / "Library" / "LaunchAgents" / "dev.jarvis.jarvisd.plist"
        how = f"launchctl load -w {dest}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(content)
    return dest, how


# -- commands -------------------------------------------------------------------------


@click.group()
def daemon() -> None:
    """Start, stop and inspect jarvisd, the background daemon."""


@daemon.command()
@click.option("--wait", default=15.0, show_default=True, help="Seconds to wait for it to answer.")
def start(wait: float) -> None:
    """Start jarvisd in the background (refuses when one already runs)."""
    pid = start_daemon(wait)
    click.echo(f"jarvisd started (pid {pid})")


@daemon.command()
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for it to stop.")
def stop(timeout: float) -> None:
    """Stop jarvisd; running tasks are checkpointed and resume at the next start."""
    pid = stop_daemon(timeout)
    click.echo("jarvisd was not running" if pid is None else f"jarvisd stopped (pid {pid})")


@daemon.command()
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for it to stop.")
@click.option("--wait", default=15.0, show_default=True, help="Seconds to wait for it to answer.")
def restart(timeout: float, wait: float) -> None:
    """Stop jarvisd (if it runs) and start it again."""
    stop_daemon(timeout)
    pid = start_daemon(wait)
    click.echo(f"jarvisd restarted (pid {pid})")


@daemon.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(as_json: bool) -> None:
    """Uptime, running and queued tasks, memory. Exit code 3 when jarvisd is not running."""
    st = _client().status()
    if as_json:
        click.echo(json.dumps(st.to_dict(), indent=2))
        return
    click.echo(f"jarvisd {st.version} (pid {st.pid}), up {_human_duration(st.uptime_s)}")
    click.echo(f"socket:  {st.socket}")
    click.echo(
        f"tasks:   {st.running} running (max {st.max_concurrent}), {st.queued} queued "
        f"(max {st.max_queued}), {st.tasks_total} stored, {st.watches} watches"
    )
    click.echo(
        f"memory:  {_human_bytes(st.memory_bytes)} (daemon; tasks run in their own processes)"
    )
    click.echo(f"config:  {st.config_source or 'defaults'}")
    if st.config_error:
        click.echo(f"config reload refused: {st.config_error}")
    if st.store_error:
        click.echo(
            f"store:   PAUSED, no task starts until it can be written: {st.store_error} "
            f"({st.stalled} stopped tasks waiting to be stored)"
        )


@daemon.command()
@click.option("--platform", default=None, help="linux or darwin (default: this machine).")
def install(platform: str | None) -> None:
    """Install the service unit that runs jarvisd at login (systemd or launchd)."""
    dest, how = install_unit(platform)
    click.echo(f"wrote {dest}")
    here = platform is None or platform == sys.platform
    if here and sys.platform.startswith("linux") and not systemd_running():
        click.echo(
            f"systemd is not running here (PID 1 is {_init_name()}): the unit cannot be "
            "enabled until it is.\nMeanwhile start jarvisd with: jarvis daemon start"
        )
    else:
        click.echo(f"enable it with:\n  {how}")
    click.echo("shell completion: jarvis completion bash|zsh|fish (see `jarvis completion --help`)")
