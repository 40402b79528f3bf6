"""``jarvisd``: run the daemon in the foreground (``jarvis daemon start`` detaches it)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from jarvisd._version import __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="jarvisd",
        description="The jarvis daemon: serves `jarvis ask` and durable tasks on a Unix socket.",
        epilog="Exit codes: 0 stopped on request, 1 failure, 2 usage, 73 already running, "
        "77 runtime directory not private, 78 invalid config.",
    )
    parser.add_argument(
        "--config", type=Path, default=None, help="config file (default: the usual)"
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    parser.add_argument("-V", "--version", action="version", version=f"jarvisd {__version__}")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s jarvisd[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    from jarvisd._config import load_config
    from jarvisd._errors import ConfigError

    from ._server import Daemon, ExitCode

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        logging.getLogger("jarvisd").error("%s", exc)
        return ExitCode.CONFIG
    daemon = Daemon(config, config_path=args.config)
    try:
        return asyncio.run(daemon.serve())
    except KeyboardInterrupt:  # a second ^C while shutting down
        return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
