"""A process that used the embedded engine ends without ``ResourceWarning: unclosed
file ... /dev/null`` (llama-cpp-python opens /dev/null twice at import and never closes
it; the suite printed both warnings after its summary)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jarvisd.engines._llamacpp import llama_cpp_available
from tests.conftest import require

LOAD = """
import sys
from jarvisd._errors import ModelFileError
from jarvisd.engines._llamacpp import LlamaCppEngine
try:
    LlamaCppEngine(sys.argv[1]).load()
except ModelFileError as exc:
    print("refused:", exc)
"""


def test_loading_the_embedded_engine_leaves_no_unclosed_file_at_exit(tmp_path: Path) -> None:
    require(llama_cpp_available(), "llama-cpp-python is not installed (run `make setup`)")
    model = tmp_path / "broken.gguf"
    model.write_bytes(b"GGUF" + bytes(60))  # imports llama_cpp, then fails to load
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-c", LOAD, str(model)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: llama.cpp could not load" in done.stdout
    assert "ResourceWarning" not in done.stderr and "unclosed file" not in done.stderr, done.stderr[
        -2000:
    ]
