"""``jarvis sandbox``: build the image, check the setup, sweep leftovers, run a command."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from .._errors import UsageError

if TYPE_CHECKING:
    from jarvisd._config import Config
    from jarvisd.netpolicy import NetEvent

__all__ = ["sandbox"]

#: Exit codes of `jarvis sandbox run` when the sandbox, not the command, ended it.
EXIT_TIMEOUT = 124
EXIT_OOM = 137


@click.group("sandbox")
def sandbox() -> None:
    """Build, check and use the sandbox agents' code runs in."""


@sandbox.command("build")
@click.option("--image", default="", help="Image name (default: config sandbox.image).")
@click.option("--mirror", default="", help="Debian mirror (default: deb.debian.org).")
@click.option("--suite", default="", help="Debian suite (default: bookworm).")
def build(image: str, mirror: str, suite: str) -> None:
    """Build the sandbox image locally (no registry: mmdebstrap + import, about 15 s)."""
    from .._config import load_config
    from ..sandbox import connect
    from ..sandbox._image import DEFAULT_MIRROR, DEFAULT_SUITE, build_image

    config = load_config()
    result = build_image(
        connect(config),
        image or config.sandbox.image,
        mirror=mirror or DEFAULT_MIRROR,
        suite=suite or DEFAULT_SUITE,
        log=lambda text: click.echo(text, err=True),
    )
    click.echo(f"built {result.image} ({result.size_bytes >> 20} MB) in {result.seconds:.1f}s")


@sandbox.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def doctor(as_json: bool) -> None:
    """Say what works (engine, image, policy, bwrap) and what to do about the rest."""
    from .._config import load_config
    from ..sandbox._doctor import diagnose

    config = load_config()
    checks = diagnose(config)
    backend = config.sandbox.backend
    needed = (
        {"backend", "engine", "image", "policy"}
        if backend in ("docker", "podman")
        else {"backend", "bwrap"}
        if backend == "bwrap"
        else {"backend"}
    )
    usable = all(c.ok for c in checks if c.name in needed)
    if as_json:
        click.echo(
            json.dumps(
                {"ok": usable, "backend": backend, "checks": [c.to_dict() for c in checks]},
                indent=2,
            )
        )
    else:
        for check in checks:
            mark = "ok  " if check.ok else "FAIL"
            click.echo(f"{mark} {check.name:14} {check.detail}")
            if check.fix:
                click.echo(f"     {'':14} fix: {check.fix}")
        click.echo(f"sandbox backend {backend!r}: {'usable' if usable else 'NOT usable'}")
    if not usable:
        sys.exit(3)


@sandbox.command("gc")
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Remove every jarvis sandbox container, also those of running jarvis processes.",
)
def gc(everything: bool) -> None:
    """Remove leftover sandbox containers (found by their jarvis.sandbox label)."""
    from .._config import load_config
    from ..sandbox import sweep_orphans

    removed = sweep_orphans(load_config(), everything=everything)
    click.echo(f"removed {len(removed)} sandbox container(s)")


@sandbox.command(
    "run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@click.option(
    "--mount",
    "mounts",
    multiple=True,
    metavar="PATH[:rw]",
    help="Mount PATH (read-only; :rw if its allowed root permits). Repeatable.",
)
@click.option("--timeout", type=float, default=None, help="Seconds (default: sandbox.timeout).")
@click.option(
    "--allow-net",
    "allow_net",
    multiple=True,
    metavar="HOST[,HOST...]",
    help="Hosts the command may reach through the run's egress proxy (HOST, "
    "*.SUFFIX, with :PORT; default ports 443 and 80), besides "
    "[sandbox.network] allow. Repeatable. Default: no network.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    mounts: tuple[str, ...],
    timeout: float | None,
    allow_net: tuple[str, ...],
    command: tuple[str, ...],
) -> None:
    """Run CMD ARGS under exactly the policy agents' code gets; exit with its code.

    Example: jarvis sandbox run --mount ./data -- python3 -c 'print(1)'
    """
    import asyncio

    from .._config import load_config
    from ._run_options import split_hosts

    config = load_config()
    if config.sandbox.backend == "none":
        raise UsageError('sandbox.backend is "none": there is no sandbox to run in')
    code = asyncio.run(_run(config, list(command), mounts, timeout, split_hosts(allow_net)))
    sys.exit(code)


async def _run(
    config: object,
    argv: list[str],
    mounts: tuple[str, ...],
    seconds: float | None,
    allow_net: tuple[str, ...] = (),
) -> int:
    import contextlib

    from .._config import Config
    from ..sandbox._netrun import RunNetwork, network_policy
    from ..sandbox._policy import SandboxPolicy
    from ._terminal import visible

    assert isinstance(config, Config)
    policy = network_policy(config, allow_net)
    async with contextlib.AsyncExitStack() as stack:
        socket_path = ""
        if not policy.empty:
            sandbox = SandboxPolicy.from_config(config)
            network = await stack.enter_async_context(
                RunNetwork(policy, uid=sandbox.uid, gid=sandbox.gid, publish=_say_net)
            )
            socket_path = network.socket_path
        code = await _run_program(config, argv, mounts, seconds, socket_path)
        if not policy.empty:
            await stack.aclose()  # the proxy's last events, then the summary
            click.echo(visible(f"jarvis: sandbox: {network.summary.line()}"), err=True)
    return code


def _say_net(event: NetEvent) -> None:
    """One line on stderr per connection the proxy saw (the run's network log)."""
    verdict = "allowed" if event.allowed else "REFUSED"
    size = f", {event.bytes_up} B up, {event.bytes_down} B down" if event.allowed else ""
    reason = f" ({event.reason})" if event.reason else ""
    from ._terminal import visible

    # The host and the reason quote what the sandboxed program sent: escaped.
    click.echo(visible(f"jarvis: net: {verdict} {event.host}:{event.port}{reason}{size}"), err=True)


async def _run_program(
    config: Config, argv: list[str], mounts: tuple[str, ...], seconds: float | None, egress: str
) -> int:
    from ..executors import ExecRequest
    from ..sandbox import executor_for_backend

    executor = executor_for_backend(config.sandbox.backend, config)
    request = ExecRequest(
        argv=argv,
        timeout=seconds or config.sandbox.timeout,
        mounts=tuple(mounts),
        proxy_socket=egress,
    )
    stdin = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    channel = await executor.open(request)
    try:
        if stdin:
            await channel.write(stdin)
        await channel.close_stdin()
        out = sys.stdout.buffer
        while line := await channel.readline():
            out.write(line)
            out.flush()
        result = await channel.wait()
    except BaseException:
        await channel.stop("cancelled")
        raise
    finally:
        close = getattr(executor, "close", None)
        if close is not None:
            close()
    if result.stdout:
        sys.stdout.write(result.stdout)
    notes = [line for line in result.stderr.splitlines() if line.startswith("[sandbox]")]
    program_err = "\n".join(
        line for line in result.stderr.splitlines() if not line.startswith("[sandbox]")
    )
    if program_err:
        sys.stderr.write(program_err + "\n")
    if result.reason == "timeout":
        click.echo(
            f"jarvis: sandbox: timed out after {request.timeout:g}s; the program was "
            "killed and its container removed",
            err=True,
        )
        return EXIT_TIMEOUT
    if result.reason == "oom":
        detail = notes[0].removeprefix("[sandbox] ") if notes else "out of memory"
        click.echo(f"jarvis: sandbox: {detail}", err=True)
        return EXIT_OOM
    return result.exit_code if result.exit_code >= 0 else 128 - result.exit_code
