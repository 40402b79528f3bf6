"""Where jarvis keeps things: the environment first, then what platformdirs would say."""

from __future__ import annotations

import sys
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


def test_the_environment_wins_and_platformdirs_is_not_imported_on_linux(tmp_path: Path) -> None:
    import subprocess

    code = "import sys, jarvisd._paths as p; p.paths(); print('platformdirs' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(sys.platform in ("darwin", "win32"))
    assert paths().config == Path(__import__("os").environ["JARVIS_CONFIG_DIR"])
