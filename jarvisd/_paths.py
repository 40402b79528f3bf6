"""Where jarvis keeps things. Every directory can be overridden by an environment
variable, so tests (and unusual installs) can point all of them somewhere else."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Paths", "paths"]

APP = "jarvis"

ENV_VARS = {
    "config": "JARVIS_CONFIG_DIR",
    "data": "JARVIS_DATA_DIR",
    "cache": "JARVIS_CACHE_DIR",
    "state": "JARVIS_STATE_DIR",
    "runtime": "JARVIS_RUNTIME_DIR",
}


@dataclass(frozen=True, slots=True)
class Paths:
    config: Path
    data: Path
    cache: Path
    state: Path
    runtime: Path

    @property
    def config_file(self) -> Path:
        override = os.environ.get("JARVIS_CONFIG")
        return Path(override) if override else self.config / "config.toml"

    @property
    def models(self) -> Path:
        return self.data / "models"

    @property
    def socket(self) -> Path:
        return self.runtime / "jarvisd.sock"

    def as_dict(self) -> dict[str, str]:
        return {
            "config": str(self.config),
            "config_file": str(self.config_file),
            "data": str(self.data),
            "cache": str(self.cache),
            "state": str(self.state),
            "runtime": str(self.runtime),
            "models": str(self.models),
            "socket": str(self.socket),
        }


def _defaults() -> dict[str, str]:
    # platformdirs on every OS: on Linux its XDG rules ($XDG_CONFIG_HOME, else
    # ~/.config, and so on), on macOS and Windows their own places.
    import platformdirs

    dirs = platformdirs.PlatformDirs(APP, appauthor=False)
    found = {
        "config": dirs.user_config_dir,
        "data": dirs.user_data_dir,
        "cache": dirs.user_cache_dir,
        "state": dirs.user_state_dir,
    }
    runtime = dirs.user_runtime_dir if os.environ.get("XDG_RUNTIME_DIR", "").strip() else ""
    # Without XDG_RUNTIME_DIR (root in a container, CI) there is no private runtime
    # directory: keep the socket under the private state dir, never a shared /tmp path.
    found["runtime"] = runtime or str(Path(found["state"]) / "run")
    return found


def paths() -> Paths:
    """Resolve the directories now (environment first, then the platform's own)."""
    defaults: dict[str, str] | None = None
    resolved = {}
    for key, var in ENV_VARS.items():
        value = os.environ.get(var)
        if not value:
            defaults = defaults or _defaults()
            value = defaults[key]
        resolved[key] = Path(value).expanduser()
    return Paths(**resolved)
