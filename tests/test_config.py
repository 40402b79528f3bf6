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
        (
            "[agents]\nwarm_agents = ['claude']",
            "agents.warm_agents",
            "a list of 'codex', 'opencode'",
        ),
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


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ("[daemon]\nmax_concurrent = 0", "daemon.max_concurrent", "an integer >= 1, got 0"),
        ("[daemon]\nmax_concurrent = -1", "daemon.max_concurrent", "an integer >= 1, got -1"),
        ("[daemon]\nmax_queued = -5", "daemon.max_queued", "an integer >= 1"),
        ("[daemon]\nmax_frame_bytes = 10", "daemon.max_frame_bytes",
         "an integer from 1024 to 67108864, got 10"),
        ("[daemon]\ntask_timeout = -1.0", "daemon.task_timeout", "a finite number > 0"),
        ("[daemon]\ntask_timeout = 0", "daemon.task_timeout", "a finite number > 0"),
        ("[daemon]\ntask_timeout = nan", "daemon.task_timeout", "a finite number > 0, got nan"),
        ("[daemon]\ntask_timeout = inf", "daemon.task_timeout", "a finite number > 0, got inf"),
        ("[daemon]\nwatch_max_dirs = 0", "daemon.watch_max_dirs", "an integer >= 1"),
        ("[engine.ollama]\ntimeout = -3", "engine.ollama.timeout", "a finite number > 0"),
        ("[engine.ollama]\nmax_context = -1", "engine.ollama.max_context", "an integer >= 0"),
        ("[agent]\ntemperature = 2.5", "agent.temperature", "a finite number from 0 to 2"),
        ("[agent]\nmax_turns = 0", "agent.max_turns", "an integer >= 1"),
        ("[sandbox]\npids = 2", "sandbox.pids", "an integer >= 8"),
        ("[sandbox]\ncpus = 0", "sandbox.cpus", "a finite number > 0"),
        ("[tools]\ntimeout = -inf", "tools.timeout", "a finite number > 0"),
    ],
)  # fmt: skip
def test_numbers_out_of_range_are_refused_naming_the_range(
    tmp_path: Path, text: str, key: str, expected: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"{path}: {key}: expected {expected}" in str(info.value)


def test_every_numeric_key_has_bounds() -> None:
    import dataclasses
    import typing

    def walk(cls: type, prefix: str) -> list[str]:
        hints = typing.get_type_hints(cls)
        missing = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            hint = hints[f.name]
            if dataclasses.is_dataclass(hint):
                missing += walk(hint, f"{prefix}{f.name}.")  # type: ignore[arg-type]
            elif hint in (int, float) and "bounds" not in f.metadata:
                missing.append(prefix + f.name)
        return missing

    assert walk(Config, "") == []


def test_defaults_are_within_their_bounds() -> None:
    import dataclasses

    def check(obj: object) -> None:
        for f in dataclasses.fields(obj):  # type: ignore[arg-type]
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                check(value)
            elif "bounds" in f.metadata:
                assert f.metadata["bounds"].admits(value), f.name

    check(Config())


def test_the_agents_kept_started_are_the_ones_the_pool_can_keep() -> None:
    # The config's choices and the pool's agents are one list, written twice.
    import typing

    from jarvisd._config import AgentsConfig
    from jarvisd.external._agentpool import POOLED

    hint = typing.get_type_hints(AgentsConfig)["warm_agents"]
    assert set(typing.get_args(typing.get_args(hint)[0])) == POOLED
    assert set(AgentsConfig().warm_agents) == {"codex"}
