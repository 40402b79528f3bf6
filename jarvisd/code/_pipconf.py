"""What pip on the host is configured to use, read the way pip reads it: the package
indexes, find-links, constraint files, the CA bundle and the trusted hosts.

A ``jarvis code`` setup installs a project in the sandbox, and may reach exactly what
the host's pip would: HTTP(S) indexes through the run's egress proxy (allowed as
``host:port``), local indexes (``file://``), find-links directories and constraint
files mounted read-only at the same paths, the CA bundle (``cert``) mounted read-only
and passed as ``PIP_CERT``.

pip's order (``pip/_internal/configuration.py``): the global files (each
``$XDG_CONFIG_DIRS/pip/pip.conf``, default ``/etc/xdg``, then ``/etc/pip.conf``), the
user's (``~/.pip/pip.conf``, then ``$XDG_CONFIG_HOME/pip/pip.conf``; skipped when
``PIP_CONFIG_FILE`` names a file that exists), then ``PIP_CONFIG_FILE``, then the
``PIP_*`` variables; a later one wins, key by key; in a file ``[install]`` wins over
``[global]``. The site file (``sys.prefix/pip.conf``) belongs to whichever Python runs
pip, not to jarvis's: it is not read.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = ["DEFAULT_INDEX", "PipSources", "host_pip_sources"]

DEFAULT_INDEX = "https://pypi.org/simple"
#: PyPI serves its files from another host than its index.
_PYPI_FILES = "files.pythonhosted.org"
#: The keys read (the others do not decide what pip reaches), and their lists.
_KEYS = (
    "index-url",
    "extra-index-url",
    "no-index",
    "find-links",
    "constraint",
    "cert",
    "trusted-host",
    "default-timeout",
)
_LISTS = ("extra-index-url", "find-links", "constraint", "trusted-host")
#: A config file larger than this is not read (pip's own are a few lines).
_MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class PipSources:
    """pip's sources on the host, and what a sandbox needs to reach them."""

    index_url: str = DEFAULT_INDEX
    extra_index_urls: tuple[str, ...] = ()
    no_index: bool = False
    find_links: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    cert: str = ""
    trusted_hosts: tuple[str, ...] = ()
    default_timeout: str = ""

    @property
    def indexes(self) -> tuple[str, ...]:
        return () if self.no_index else (self.index_url, *self.extra_index_urls)

    def hosts(self) -> tuple[str, ...]:
        """The ``host:port`` entries the proxy allows: each HTTP(S) index, find-links
        and constraint URL (PyPI's file host with PyPI)."""
        found: list[str] = []
        for url in (*self.indexes, *self.find_links, *self.constraints):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                continue
            port = parts.port or (443 if parts.scheme == "https" else 80)
            found.append(f"{parts.hostname}:{port}")
            if parts.hostname == "pypi.org":
                found.append(f"{_PYPI_FILES}:443")
        return tuple(dict.fromkeys(found))

    def binds(self) -> tuple[tuple[str, str], ...]:
        """(host path, path inside) to mount read-only: each local index's parent
        directory (an index's pages link to its files beside it, ``../../files/``),
        local find-links and constraint files, the CA bundle. Missing ones are left
        out (pip only warns about them); nothing mounts the whole root."""
        wanted = [_local_path(u) for u in (*self.find_links, *self.constraints, self.cert)]
        for url in self.indexes:
            path = _local_path(url)
            parent = os.path.dirname(path.rstrip("/"))
            wanted.append(parent if parent not in ("", "/") else path)
        found: dict[str, str] = {}
        for path in wanted:
            if path and path != "/" and os.path.exists(path):
                found.setdefault(path, os.path.realpath(path))
        return tuple((real, inside) for inside, real in found.items())

    def env(self) -> dict[str, str]:
        """pip's configuration in the sandbox, as variables (its own files are ignored).
        A URL's user and password (a private index's token) stay on the host: the setup
        runs the project's build code, which would read them from its environment."""
        env = {
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1",
            "PIP_INDEX_URL": without_credentials(self.index_url),
        }
        if self.no_index:
            env["PIP_NO_INDEX"] = "1"
        values = {
            "PIP_EXTRA_INDEX_URL": self.extra_index_urls,
            "PIP_FIND_LINKS": self.find_links,
            "PIP_CONSTRAINT": self.constraints,
            "PIP_TRUSTED_HOST": self.trusted_hosts,
        }
        env.update({k: " ".join(map(without_credentials, v)) for k, v in values.items() if v})
        if self.cert:
            env["PIP_CERT"] = self.cert
        if self.default_timeout:
            env["PIP_DEFAULT_TIMEOUT"] = self.default_timeout
        return env


def without_credentials(url: str) -> str:
    """``url`` without its ``user:password@`` part (other text as it is)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _local_path(url: str) -> str:
    """The path a ``file://`` URL or a plain path names ("" for other URLs)."""
    if url.startswith("file:"):
        return unquote(urlsplit(url).path)
    if "://" in url or not url:
        return ""
    return os.path.abspath(os.path.expanduser(url))


def _config_files(environ: Mapping[str, str], home: Path) -> list[Path]:
    dirs = environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    files = [Path(d) / "pip" / "pip.conf" for d in dirs.split(":") if d]
    files.append(Path("/etc/pip.conf"))
    named = environ.get("PIP_CONFIG_FILE")
    if not (named and os.path.exists(named)):
        xdg_home = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
        files += [home / ".pip" / "pip.conf", xdg_home / "pip" / "pip.conf"]
    if named and named != os.devnull:
        files.append(Path(named))
    return files


def _read(path: Path) -> dict[str, str]:
    """``[global]`` then ``[install]`` of one file (an unreadable file: nothing)."""
    try:
        if path.stat().st_size > _MAX_CONFIG_BYTES:
            return {}
        parser = configparser.RawConfigParser()
        parser.read_string(path.read_text(errors="replace"))
    except (OSError, configparser.Error):
        return {}
    values: dict[str, str] = {}
    for section in ("global", "install"):
        if parser.has_section(section):
            for key, value in parser.items(section):
                values[key.replace("_", "-")] = value
    return values


def host_pip_sources(
    environ: Mapping[str, str] | None = None, home: Path | None = None
) -> PipSources:
    """The host's pip sources (``environ`` and ``home`` for tests)."""
    environ = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    values: dict[str, str] = {}
    for path in _config_files(environ, home):
        values.update(_read(path))
    for key in _KEYS:
        variable = "PIP_" + key.upper().replace("-", "_")
        if variable in environ:
            values[key] = environ[variable]
    lists = {key: tuple(values.get(key, "").split()) for key in _LISTS}
    no_index = values.get("no-index", "").strip().lower() in ("1", "true", "yes", "on")
    return PipSources(
        index_url=values.get("index-url", "").strip() or DEFAULT_INDEX,
        extra_index_urls=lists["extra-index-url"],
        no_index=no_index,
        find_links=lists["find-links"],
        constraints=lists["constraint"],
        cert=values.get("cert", "").strip(),
        trusted_hosts=lists["trusted-host"],
        default_timeout=values.get("default-timeout", "").strip(),
    )
