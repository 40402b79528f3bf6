"""The documentation site's made parts and its command check (packaging/docs/hooks.py),
without MkDocs: setup.sh --test builds the whole site with ``mkdocs build --strict``."""

from __future__ import annotations

import dataclasses
import importlib.util
import typing
from pathlib import Path
from types import ModuleType

import click

from jarvisd._config import Config

ROOT = Path(__file__).parents[1]


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "packaging/docs/hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_has_every_command() -> None:
    from jarvisd.cli import cli

    def paths(command: click.Command, path: str, parent: click.Context | None) -> list[str]:
        ctx = click.Context(command, info_name=path.split()[-1], parent=parent)
        found = [path]
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                found += paths(sub, f"{path} {name}", ctx)
        return found

    reference = _hooks().cli_reference()
    every = paths(cli, "jarvis", None)
    assert len(every) > 50
    assert not [path for path in every if f"# `{path}`\n" not in reference]
    assert "`--max-tokens-total INTEGER RANGE`" in reference


def test_the_config_reference_has_every_key() -> None:
    reference = _hooks().config_reference()

    def keys(cls: type, table: str) -> list[tuple[str, str]]:
        found = []
        for f in dataclasses.fields(cls):
            hint = typing.get_type_hints(cls)[f.name]
            if f.name == "source":
                continue
            if dataclasses.is_dataclass(hint):
                found += keys(typing.cast(type, hint), f"{table}.{f.name}".lstrip("."))
            elif typing.get_origin(hint) is typing.get_origin(typing.Mapping[str, str]) and (
                dataclasses.is_dataclass(typing.get_args(hint)[1])
            ):
                item = typing.cast(type, typing.get_args(hint)[1])
                found += keys(item, f"{table}.{f.name}.NAME".lstrip("."))
            else:
                found.append((table, f.name))
        return found

    every = keys(Config, "")
    assert len(every) > 60
    for table, key in every:
        section = reference.split(f"## `[{table}]`\n", 1)[1].split("\n## ", 1)[0]
        assert f"| `{key}` |" in section, (table, key)
    assert "| `n_ctx` | an integer >= 1 | `4096` | Where the window starts" in reference


def test_a_command_or_option_the_cli_lacks_is_found() -> None:
    check = _hooks().check_commands
    page = (
        '```sh\njarvis task submit --agent simple --watch DIR "..."\n'
        'jarvis task frobnicate ID\njarvis ask --no-such-flag "hi"\n'
        'jarvis code ~/proj "fix it" --candidates 3\njarvis daemon start|stop|explode\n```\n'
        "Then `jarvis models pul NAME`.\n"
    )
    problems = list(check(page))
    assert problems == [
        "`jarvis task frobnicate ID`: `jarvis task` has no command 'frobnicate'",
        '`jarvis ask --no-such-flag "hi"`: `jarvis ask` has no option --no-such-flag',
        "`jarvis daemon start|stop|explode`: `jarvis daemon` has no command 'explode'",
        "`jarvis models pul NAME`: `jarvis models` has no command 'pul'",
    ]


def test_the_readme_is_a_short_front_page_that_passes_the_check() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert "bash packaging/dev/setup.sh --demo\n" in readme
    assert "bash packaging/dev/setup.sh --test\n" in readme
    assert list(_hooks().check_commands(readme)) == []


def test_a_path_the_repository_lacks_is_found() -> None:
    check = _hooks().check_paths
    page = (
        "See `jarvisd/_config.py`, `tests/test_docs.py::test_x`, `benchmarks/results/*.md`\n"
        "and `jarvisd/no_such_module.py`, `tests/gone/test_y.py::test_z`.\n"
    )
    assert list(check(page)) == [
        "`jarvisd/no_such_module.py`: no such file or directory in the repository",
        "`tests/gone/test_y.py`: no such file or directory in the repository",
    ]
