"""Where jarvis keeps things: the environment first, then what platformdirs would say."""

from __future__ import annotations

from pathlib import Path

import platformdirs
import pytest

from jarvisd._paths import ENV_VARS, paths


@pytest.mark.parametrize("xdg", [False, True])
def test_defaults_are_platformdirs_own(
    xdg: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ENV_VARS.values():
        monkeypatch.delenv(var, raising=False)
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME",
                "XDG_RUNTIME_DIR"):  # fmt: skip
        if xdg:
            monkeypatch.setenv(var, str(tmp_path / var.lower()))
        else:
            monkeypatch.delenv(var, raising=False)
    dirs = platformdirs.PlatformDirs("jarvis", appauthor=False)
    found = paths()
    assert str(found.config) == dirs.user_config_dir
    assert str(found.data) == dirs.user_data_dir
    assert str(found.cache) == dirs.user_cache_dir
    assert str(found.state) == dirs.user_state_dir
    if xdg:
        assert str(found.runtime) == dirs.user_runtime_dir
    else:  # never a guessed shared path: under the private state directory
        assert found.runtime == found.state / "run"


def test_platformdirs_gives_the_defaults_on_every_os(monkeypatch: pytest.MonkeyPatch) -> None:
    # Linux too: its rules are platformdirs', not a copy of them kept by hand.
    class Dirs:
        def __init__(self, app: str, appauthor: bool) -> None:
            assert (app, appauthor) == ("jarvis", False)
            self.user_config_dir, self.user_data_dir = "/pd/config", "/pd/data"
            self.user_cache_dir, self.user_state_dir = "/pd/cache", "/pd/state"
            self.user_runtime_dir = "/pd/run"

    for var in ENV_VARS.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(platformdirs, "PlatformDirs", Dirs)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/pd/xdg")
    found = paths()
    assert (found.config, found.data, found.cache, found.state, found.runtime) == tuple(
        Path(f"/pd/{name}") for name in ("config", "data", "cache", "state", "run")
    )


def test_the_environment_wins() -> None:
    assert paths().config == Path(__import__("os").environ["JARVIS_CONFIG_DIR"])
