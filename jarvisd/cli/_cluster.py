"""``jarvis cluster``: the Ray cluster jarvisd's tasks run on (``[cluster]``)."""

from __future__ import annotations

import json
import sys

import click


@click.group()
def cluster() -> None:
    """The Ray cluster jarvisd's tasks run on ([cluster] backend = "ray")."""


@cluster.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor(as_json: bool) -> None:
    """Check every node of the cluster: reachable, its resources and labels, jarvis's
    version there, its container engine and sandbox image (nodes with `docker`), its
    models (`model:NAME`), and the engine a task there would use. One line per node,
    then a verdict; exits 1 when anything is wrong."""
    from .._config import load_config
    from ..cluster._doctor import doctor as check

    config = load_config()
    if config.cluster.backend != "ray":
        click.echo('jarvis: [cluster] backend is "local": tasks run on this machine', err=True)
    report = check(config)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        for node in report.nodes:
            has = ", ".join(
                _resource(k, v)
                for k, v in sorted(node.resources.items())
                if not k.startswith("node:")  # Ray's own per-address resource
            )
            labels = ", ".join(f"{k}={v}" for k, v in sorted(node.labels.items()))
            mark = "ok  " if node.ok else "FAIL"
            role = "" if node.worker else " (takes no task: no jarvis resource)"
            click.echo(f"{mark} {node.node[:12]} {node.address}{role}: {has}")
            if labels:
                click.echo(f"       labels: {labels}")
            for c in node.checks:
                click.echo(f"       {'ok  ' if c.ok else 'FAIL'} {c.name:10} {c.detail}")
                if c.fix:
                    click.echo(f"            fix: {c.fix}")
        problems = report.problems
        workers = sum(n.worker for n in report.nodes)
        if problems:
            click.echo(f"cluster at {report.address}: {len(problems)} problem(s)")
            for line in problems:
                click.echo(f"  - {line}")
        else:
            click.echo(f"cluster at {report.address}: usable, {workers} node(s) take tasks")
    if report.problems:
        sys.exit(1)


def _resource(name: str, value: float) -> str:
    if name.endswith("memory"):  # bytes: Ray's memory and object_store_memory
        return f"{name}={value / 2**30:.1f}GiB"
    return f"{name}={value:g}"
