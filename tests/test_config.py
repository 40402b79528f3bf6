from __future__ import annotations

from pathlib import Path

import pytest

from jarvisd import ConfigError, load_config
from jarvisd._config import Config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_missing_default_file_gives_defaults() -> None:
    assert load_config() == Config()


def test_values_are_typed(tmp_path: Path) -> None:
    cfg = load_config(
        write(
            tmp_path,
            """
[engine]
default = "ollama"
[engine.ollama]
host = "http://10.0.0.5:11434"
timeout = 5
[sandbox]
allowed_roots = ["/srv/data", "/srv/out:rw"]
""",
        )
    )
    assert cfg.engine.default == "ollama"
    assert cfg.engine.ollama.timeout == 5.0 and isinstance(cfg.engine.ollama.timeout, float)
    assert cfg.sandbox.allowed_roots == ("/srv/data", "/srv/out:rw")
    assert cfg.source == str(tmp_path / "config.toml")


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ("[engine]\ndefault = 'gpt'", "engine.default", "one of"),
        ("[agent]\nmax_tokens = 'many'", "agent.max_tokens", "an integer"),
        ("[agent]\nmax_tokens = true", "agent.max_tokens", "an integer"),
        ("[agent]\ntemprature = 0.1", "agent.temprature", "unknown key"),
        ("[tools]\nfile_read_roots = '/tmp'", "tools.file_read_roots", "a list of strings"),
        ("engine = 3", "engine", "a table"),
        ("[engine\n", "", "valid TOML"),
    ],
)
def test_bad_file_names_file_key_and_expectation(
    tmp_path: Path, text: str, key: str, expected: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message
    assert key in message
    assert expected in message


def test_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="an existing file"):
        load_config(tmp_path / "nope.toml")


def test_env_overrides_every_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jarvisd._paths import ENV_VARS, paths

    for key, var in ENV_VARS.items():
        monkeypatch.setenv(var, str(tmp_path / key))
    p = paths()
    for key in ENV_VARS:
        assert getattr(p, key) == tmp_path / key
    monkeypatch.setenv("JARVIS_CONFIG", str(tmp_path / "x.toml"))
    assert paths().config_file == tmp_path / "x.toml"
