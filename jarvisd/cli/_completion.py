"""``jarvis completion SHELL``: print the shell completion script (click's)."""

from __future__ import annotations

import click

__all__ = ["completion", "completion_script"]

SHELLS = ("bash", "zsh", "fish")


def completion_script(shell: str) -> str:
    """The completion script for ``shell``, as click generates it for ``jarvis``."""
    from click.shell_completion import get_completion_class

    from jarvisd.cli import cli

    cls = get_completion_class(shell)
    if cls is None:  # pragma: no cover - click ships all three
        raise click.UsageError(f"no completion for {shell}")
    return cls(cli, {}, "jarvis", "_JARVIS_COMPLETE").source()


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL.

    \b
    bash: jarvis completion bash > ~/.local/share/bash-completion/completions/jarvis
    zsh:  jarvis completion zsh > "${fpath[1]}/_jarvis"
    fish: jarvis completion fish > ~/.config/fish/completions/jarvis.fish
    """
    click.echo(completion_script(shell))
