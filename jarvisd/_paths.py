"""Where jarvis keeps things. Every directory can be overridden by an environment
variable, so tests (and unusual installs) can point all of them somewhere else."""

from __future__ import annotations

import os
import sys
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


#: The XDG base directories (variable, default) that platformdirs uses on Linux.
_XDG = {
    "config": ("XDG_CONFIG_HOME", "~/.config"),
    "data": ("XDG_DATA_HOME", "~/.local/share"),
    "cache": ("XDG_CACHE_HOME", "~/.cache"),
    "state": ("XDG_STATE_HOME", "~/.local/state"),
}


def _defaults() -> dict[str, str]:
    if sys.platform in ("darwin", "win32"):
        import platformdirs

        dirs = platformdirs.PlatformDirs(APP, appauthor=False)
        found = {"config": dirs.user_config_dir, "data": dirs.user_data_dir,
                 "cache": dirs.user_cache_dir, "state": dirs.user_state_dir}  # fmt: skip
        runtime = dirs.user_runtime_dir if os.environ.get("XDG_RUNTIME_DIR") else ""
    else:
        # What platformdirs answers on Linux, without importing it on every command.
        found = {
            key: os.path.join(os.environ.get(var, "").strip() or os.path.expanduser(home), APP)
            for key, (var, home) in _XDG.items()
        }
        xdg_runtime = os.environ.get("XDG_RUNTIME_DIR", "").strip()
        runtime = os.path.join(xdg_runtime, APP) if xdg_runtime else ""
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
