"""The ``jarvis`` command line: a thin shim over plain functions.

Each command lives in its own module, imported only when that command runs, so
``jarvis --help`` imports nothing heavy. Errors are printed once, here, as one line.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from .._version import __version__

# name -> ("module:attr", one-line help). Help text is kept here so that listing the
# commands never imports them.
COMMANDS: dict[str, tuple[str, str]] = {
    "acp": ("jarvisd.cli._acp:acp", "Be an ACP agent for editors and ACP clients, on stdio."),
    "agents": ("jarvisd.cli._agents:agents", "List the agents and whether they accept tools."),
    "cluster": (
        "jarvisd.cli._cluster:cluster",
        "Check the Ray cluster jarvisd's tasks run on: every node, what it has and lacks.",
    ),
    "code": (
        "jarvisd.cli._code:code",
        "Let an agent change a project on a workspace; review, apply or discard the diff.",
    ),
    "ask": ("jarvisd.cli._ask:ask", "Ask a one-off question and print the answer."),
    "config": ("jarvisd.cli._config:config", "Show the configuration and where it lives."),
    "completion": ("jarvisd.cli._completion:completion", "Print the shell completion script."),
    "daemon": ("jarvisd.cli._daemon:daemon", "Start, stop and inspect the jarvisd daemon."),
    "eval": (
        "jarvisd.cli._eval:eval_group",
        "Measure models and agents on this machine: tool calls (BFCL), real bugs (codefix).",
    ),
    "memory": ("jarvisd.cli._memory:memory", "Add text to memory and search it."),
    "models": ("jarvisd.cli._models:models", "List, download and locate local models."),
    "tools": ("jarvisd.cli._tools:tools", "List tools and run one directly."),
    "trace": ("jarvisd.cli._trace:trace", "List recorded runs and show one."),
    "sandbox": ("jarvisd.cli._sandbox:sandbox", "Build, check and use the agents' sandbox."),
    "serve": (
        "jarvisd.cli._serve:serve",
        "Serve jarvis's agents and teams as models on the OpenAI API.",
    ),
    "serve-model": (
        "jarvisd.cli._serve:serve_model",
        "Serve local models over the Ollama and OpenAI HTTP APIs.",
    ),
    "task": ("jarvisd.cli._task:task", "Hand long tasks to jarvisd: submit, logs, wait, cancel."),
    "ui": ("jarvisd.cli._ui:ui", "Open the web console: tasks live, approvals, code review."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        from .._plugins import import_from_string

        command = import_from_string(COMMANDS[cmd_name][0])
        assert isinstance(command, click.Command), cmd_name
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


EPILOG = """\
Exit codes: 0 success, 1 failure, 2 usage error, 3 engine or sandbox unavailable.
Every directory can be moved with JARVIS_CONFIG_DIR, JARVIS_DATA_DIR, JARVIS_CACHE_DIR,
JARVIS_STATE_DIR, JARVIS_RUNTIME_DIR; JARVIS_CONFIG names the config file itself.
"""


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="jarvis")
@click.option("-v", "--verbose", count=True, help="Log more (-v info, -vv debug) to stderr.")
@click.pass_context
def cli(ctx: click.Context, verbose: int) -> None:
    """jarvis: a sandboxed, local-first agent runtime.

    Ask questions of a local model, run agents with tools, in containers with the
    network off, and hand long tasks to the jarvisd daemon.
    """
    import logging

    level = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    ctx.ensure_object(dict)


def main(argv: list[str] | None = None) -> Any:
    """Entry point: run the CLI, turning jarvis errors into one line and an exit code."""
    from .._errors import JarvisError

    try:
        return cli.main(args=argv, prog_name="jarvis", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except JarvisError as exc:
        click.echo(f"jarvis: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
