"""MkDocs hook (mkdocs.yml ``hooks:``): the parts of the site that are made, not written.

A page holds a marker where a generated part goes; the hook replaces it while the site
is built, so nothing generated is committed and nothing can drift:

- ``<!-- generated: config -->``: every key of the config file, from the schema in
  ``jarvisd/_config.py`` (its dataclasses, defaults, bounds, and the comments written
  beside each field);
- ``<!-- generated: cli -->``: every command and option of ``jarvis``, from the click app;
- ``<!-- include: benchmarks/results/NAME.md -->``: a results file, headings demoted.

It also checks every ``jarvis ...`` line of the pages' shell blocks against the click
app: a command or an option that does not exist fails the build (``--strict`` or not),
naming the page and the line. An unknown marker fails it too.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import logging
import re
import tokenize
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Literal

import click

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- (generated|include): ([\w./-]+) -->")
INLINE = re.compile(r"`(jarvis [^`]+)`")
FENCE = re.compile(r"^```(?:sh|bash|console)\n(.*?)^```", re.M | re.S)


try:
    from mkdocs.exceptions import PluginError as _Base
except ImportError:  # the generators alone, outside a build
    _Base = Exception  # type: ignore[assignment,misc]

# MkDocs counts this logger's warnings: `--strict` fails on them.
log = logging.getLogger("mkdocs.plugins.jarvis_docs")


class DocsError(_Base):
    """A page that cannot be built as written (MkDocs prints it and stops)."""


# -- the hook ----------------------------------------------------------------------------


def on_page_markdown(markdown: str, page: object, **_: object) -> str:
    where = getattr(getattr(page, "file", None), "src_path", "?")
    markdown = MARKER.sub(lambda m: _expand(m.group(1), m.group(2), where), markdown)
    for problem in [*check_commands(markdown), *check_paths(markdown)]:
        log.warning("%s: %s", where, problem)
    return markdown


def _expand(kind: str, name: str, where: str) -> str:
    if kind == "generated":
        make = GENERATED.get(name)
        if make is None:
            raise DocsError(f"{where}: no generated part named {name!r} ({', '.join(GENERATED)})")
        return make()
    path = (ROOT / name).resolve()
    if ROOT not in path.parents or not path.is_file():
        raise DocsError(f"{where}: cannot include {name}: no such file in the repository")
    # The included file's headings sit under the page's own (## at most).
    text = re.sub(
        r"^(#{1,4}) ", lambda m: "#" * (len(m.group(1)) + 2) + " ", path.read_text(), flags=re.M
    )
    return text.rstrip("\n") + f"\n\n*From `{name}`.*\n"


# -- the configuration reference -------------------------------------------------------


def config_reference() -> str:
    from jarvisd import _config

    notes = _field_comments(Path(_config.__file__).read_text())
    out: list[str] = []
    for table, cls in _tables(_config.Config, ""):
        doc = cls.__doc__ if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(") else ""
        rows = []
        for f in dataclasses.fields(cls):
            hint = typing.get_type_hints(cls)[f.name]
            if f.name == "source" or _is_table(hint):
                continue
            bounds = f.metadata.get("bounds")
            kind = _kind(hint)
            if bounds is not None:
                kind = bounds.describe(hint is int)
            note = notes.get((cls.__name__, f.name), "")
            rows.append(f"| `{f.name}` | {_cell(kind)} | `{_default(f)}` | {_cell(note)} |")
        if not rows and not doc:
            continue  # a table of tables only ([mcp]): its children say it all
        out.append(f"## `[{table}]`\n")
        if doc:
            out.append(_rst(doc) + "\n")
        if rows:
            out.append("| key | value | default | what |\n|---|---|---|---|")
            out.extend(rows)
            out.append("")
    return "\n".join(out)


def _tables(cls: type, prefix: str) -> Iterator[tuple[str, type]]:
    """Each TOML table of the schema, parents before children: (dotted name, dataclass)."""
    hints = typing.get_type_hints(cls)
    if prefix:
        yield prefix, cls
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        name = f"{prefix}.{f.name}" if prefix else f.name
        if dataclasses.is_dataclass(hint):
            yield from _tables(typing.cast(type, hint), name)
        elif typing.get_origin(hint) is Mapping:
            item = typing.get_args(hint)[1]
            if dataclasses.is_dataclass(item):
                yield from _tables(typing.cast(type, item), name + ".NAME")


def _is_table(hint: object) -> bool:
    if dataclasses.is_dataclass(hint):
        return True
    return typing.get_origin(hint) is Mapping and dataclasses.is_dataclass(typing.get_args(hint)[1])


def _kind(hint: object) -> str:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return " | ".join(json.dumps(c) for c in typing.get_args(hint))
    if origin is tuple:
        return "a list of strings"
    if origin is Mapping:
        return "a table: NAME = " + _kind(typing.get_args(hint)[1])
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_kind(a) for a in typing.get_args(hint))
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
    return names.get(hint, str(hint)) if isinstance(hint, type) else str(hint)


def _default(f: dataclasses.Field[object]) -> str:
    value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return json.dumps(list(value))
    if isinstance(value, Mapping):
        return "{}" if not value else json.dumps(dict(value))
    return json.dumps(value)


def _field_comments(source: str) -> dict[tuple[str, str], str]:
    """(class, field) -> the comments written beside the field: the comment lines right
    above it and the one at the end of its line, joined."""
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and not tok.string.startswith("# fmt:"):
            comments[tok.start[0]] = tok.string.lstrip("#: ").strip()
    lines = source.splitlines()
    found: dict[tuple[str, str], str] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            above: list[str] = []
            line = item.lineno - 1
            while line >= 1 and lines[line - 1].strip().startswith("#"):
                above.insert(0, comments.get(line, ""))
                line -= 1
            after = comments.get(item.end_lineno or item.lineno, "")
            found[(node.name, item.target.id)] = " ".join(p for p in [*above, after] if p)
    return found


def _rst(text: str) -> str:
    """A docstring's reStructuredText literals as Markdown's, its lines joined."""
    return " ".join(line.strip() for line in text.strip().splitlines()).replace("``", "`")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


# -- the CLI reference -----------------------------------------------------------------


def cli_reference() -> str:
    from jarvisd.cli import cli

    out: list[str] = []
    for path, command, ctx in _commands(cli, "jarvis", None):
        depth = min(len(path.split()) + 1, 5)
        out.append(f"{'#' * depth} `{path}`\n")
        out.append(f"```text\n{path} {' '.join(command.collect_usage_pieces(ctx))}\n```\n")
        if command.help:
            out.append(_help_text(command.help) + "\n")
        rows = []
        for param in command.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None or getattr(param, "hidden", False):
                continue
            names, text = record
            rows.append(f"| `{names}` | {_cell(_escape(text))} |")
        if rows:
            out.append("| option | what |\n|---|---|")
            out.extend(rows)
            out.append("")
        if command.epilog:
            out.append(_help_text(command.epilog) + "\n")
    return "\n".join(out)


def _commands(
    command: click.Command, path: str, parent: click.Context | None
) -> Iterator[tuple[str, click.Command, click.Context]]:
    ctx = click.Context(
        command, info_name=path.split()[-1], parent=parent, **command.context_settings
    )
    yield path, command, ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _commands(sub, f"{path} {name}", ctx)


def _help_text(text: str) -> str:
    """Click's help as Markdown: ``\\b`` paragraphs (kept as written) become code
    blocks, the rest is escaped prose."""
    out = []
    for para in re.split(r"\n\s*\n", text.strip()):
        if para.lstrip().startswith("\b"):
            body = "\n".join(line.strip() for line in para.splitlines()[1:])
            out.append(f"```text\n{body}\n```")
        else:
            out.append(_escape(" ".join(line.strip() for line in para.splitlines())))
    return "\n\n".join(out)


def _escape(text: str) -> str:
    """Help text as Markdown prose: `code` spans kept, nothing else read as markup."""
    return re.sub(r"([\\*_<>\[\]])", r"\\\1", text)


def benchmark_results() -> str:
    """Every results file of benchmarks/results/, as the last run wrote it: a new one
    is on the page without anyone adding it."""
    out = []
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.md")):
        title, _, body = path.read_text().partition("\n")
        out.append(f"### {title.lstrip('# ').strip()} (`{path.name}`)\n")
        out.append(
            re.sub(r"^(#{1,3}) ", lambda m: "#" * (len(m.group(1)) + 3) + " ", body, flags=re.M)
        )
    return "\n".join(out)


def home() -> str:
    """The README, the site's front page too: its links into docs/ made relative."""
    text = (ROOT / "README.md").read_text()
    return re.sub(r"\]\(docs/", "](", text)


GENERATED: dict[str, Callable[[], str]] = {
    "config": config_reference,
    "cli": cli_reference,
    "home": home,
    "benchmarks": benchmark_results,
}


# -- the files the pages name ----------------------------------------------------------

#: A repository path in inline code: `jarvisd/daemon/_protocol.py`, `tests/x.py::test_y`.
REPO_PATH = re.compile(
    r"`((?:jarvisd|tests|runners|benchmarks|packaging|node_bridge|sandbox)/[\w./*-]*)(?:::[\w:\[\]-]*)?`"
)


def check_paths(markdown: str) -> Iterator[str]:
    """A file or directory a page names that the repository does not hold (moved or
    renamed since the page was written)."""
    for path in REPO_PATH.findall(markdown):
        path = path.rstrip(".")
        if not (ROOT / path).exists() and not any(ROOT.glob(path)):
            yield f"`{path}`: no such file or directory in the repository"


# -- the commands the pages show -------------------------------------------------------


def check_commands(markdown: str) -> Iterator[str]:
    """What is wrong with the ``jarvis ...`` lines of a page's shell blocks and its
    inline ``jarvis ...`` code (a span broken over lines is a message, not a command)."""
    lines = [line for block in FENCE.findall(markdown) for line in _command_lines(block)]
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)
    lines += [span for span in INLINE.findall(prose) if "\n" not in span]
    for line in lines:
        for variant in _variants(line):
            problem = _check(variant)
            if problem:
                yield f"`{line}`: {problem}"


def _command_lines(block: str) -> Iterator[str]:
    """Each ``jarvis`` command of a block, with its continuation lines (an indented
    ``[--option ...]`` or a line ending in a backslash) joined to it."""
    current: str | None = None
    for raw in block.splitlines():
        line = raw.split(" # ", 1)[0].rstrip()
        stripped = line.strip()
        if stripped.startswith("$ "):
            stripped = stripped[2:]
        if current is not None and (
            (raw[:1].isspace() and stripped.startswith("[")) or current.endswith("\\")
        ):
            current = current.rstrip("\\") + " " + stripped
            continue
        if current is not None:
            yield current
        current = stripped if re.match(r"jarvis( |$)", stripped) else None
    if current is not None:
        yield current


def _variants(line: str) -> list[str]:
    """``jarvis daemon start|stop`` is two commands to check."""
    words = line.split()
    for i, word in enumerate(words[:3]):
        if re.fullmatch(r"[a-z-]+(\|[a-z-]+)+", word):
            return [" ".join([*words[:i], alt, *words[i + 1 :]]) for alt in word.split("|")]
    return [line]


def _check(line: str) -> str | None:
    from jarvisd.cli import cli

    words = line.split()[1:]
    command: click.Command = cli
    ctx = click.Context(cli, info_name="jarvis")
    path = "jarvis"
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        name = words[0]
        sub = command.get_command(ctx, name)
        if sub is None and type(command).parse_args is not click.Group.parse_args:
            sub = command.get_command(ctx, "run")  # `jarvis code PATH TASK`
            name = "run"
        else:
            words = words[1:]
        if sub is None:
            if name in ("...", "ID") or not re.fullmatch(r"[a-z-]+", name):
                break
            return f"`{path}` has no command {name!r}"
        path += f" {name}"
        ctx = click.Context(sub, info_name=name, parent=ctx)
        command = sub
    if isinstance(command, click.Group) and type(command).parse_args is not click.Group.parse_args:
        command = command.get_command(ctx, "run") or command  # `jarvis code --candidates 3 ...`
    known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    if isinstance(command, click.Group) or command is cli:
        known |= {opt for p in cli.params for opt in (*p.opts, *p.secondary_opts)}
    known |= {"--help", "-h"}
    if "--" in words:  # what follows is the program's, not jarvis's
        words = words[: words.index("--")]
    unquoted = re.sub(r"\"[^\"]*\"|'[^']*'", "", " ".join(words))
    for word in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", unquoted):
        if word.startswith("--") and word not in known:
            return f"`{path}` has no option {word}"
    return None
