"""``jarvis ui``: open the web console that jarvisd serves on a loopback port."""

from __future__ import annotations

import click


@click.command()
@click.option("--no-open", is_flag=True, help="Only print the URL; open no browser.")
def ui(no_open: bool) -> None:
    """Print the console's URL, with a one-time login token, and open it in the browser.

    The token becomes an HttpOnly, SameSite=Strict session cookie when the URL is
    opened; a second use of the same URL is refused. `[ui] enabled` and `[ui] port`
    in the config say whether and where jarvisd serves the console."""
    from jarvisd.daemon import Client

    url = Client(timeout=10.0).ui_login()
    click.echo(url)
    if not no_open:
        import webbrowser

        if not webbrowser.open(url):
            click.echo("jarvis: no browser found: open the URL above", err=True)
