"""CLI rows: start-up time against OpenJarvis, and `jarvis ask` overhead over calling the
same engine directly, both as whole processes, interleaved in one run."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

from benchmarks.harness import BenchEnv, Row, median, percentile, time_commands


def _help_row(env: BenchEnv) -> list[Row]:
    commands = {"jarvis": [env.jarvis_bin(), "--help"]}
    if env.openjarvis_python:
        commands["openjarvis"] = [str(Path(env.openjarvis_python).parent / "jarvis"), "--help"]
    times = time_commands(commands, env.runs(15, 5), env.warmups())
    ours = median(times["jarvis"]) * 1000
    if "openjarvis" not in times:
        return [Row("`jarvis --help` start-up", ours, "ms", target="< 150 ms",
                    passed=ours < 150, notes=f"OpenJarvis unavailable: {env.openjarvis_error}")]  # fmt: skip
    theirs = median(times["openjarvis"]) * 1000
    return [
        Row(
            "`jarvis --help` start-up",
            ours,
            "ms",
            baseline=theirs,
            baseline_name="OpenJarvis 1.0.4 `jarvis --help`",
            target="< 150 ms and <= 1/15 of OpenJarvis",
            passed=ours < 150 and ours / theirs <= 1 / 15,
            notes=f"p95 {percentile(times['jarvis'], 95) * 1000:.0f} ms vs "
            f"{percentile(times['openjarvis'], 95) * 1000:.0f} ms",
        )
    ]


def _ask_rows(env: BenchEnv) -> list[Row]:
    """`jarvis ask` against a direct client call of the same engine (a scripted engine
    behind the Ollama API, so the model's time does not drown the overhead)."""
    from jarvisd.engines import ScriptedEngine, reply
    from jarvisd.testing import OllamaStandIn

    config_dir = env.tmp / "ask-config"
    config_dir.mkdir(exist_ok=True)
    engine = ScriptedEngine(fallback=reply("Red, yellow and blue."))
    with OllamaStandIn(engine) as standin:
        (config_dir / "config.toml").write_text(
            f'[engine]\ndefault = "ollama"\nmodel = "scripted"\n[engine.ollama]\nhost = "{standin.url}"\n'
        )
        direct = textwrap.dedent(f"""
            import ollama
            r = ollama.Client(host={standin.url!r}, timeout=30).chat(
                model="scripted", messages=[{{"role": "user", "content": "Name three primary colors."}}],
                options={{"num_ctx": 8192}})
            print(r.message.content)
        """)
        process_env = dict(
            os.environ, JARVIS_CONFIG_DIR=str(config_dir), JARVIS_DATA_DIR=str(env.tmp / "data")
        )
        # No jarvisd runs here (its runtime dir is the bench's own): the in-process path.
        process_env["JARVIS_RUNTIME_DIR"] = str(env.tmp / "ask-runtime")
        times = time_commands(
            {
                "jarvis": [env.jarvis_bin(), "ask", "--no-stream", "Name three primary colors."],
                "direct": [env.python, "-c", direct],
            },
            env.runs(15, 5),
            env.warmups(),
            env=process_env,
        )
    ours, base = median(times["jarvis"]) * 1000, median(times["direct"]) * 1000
    return [
        Row(
            "`jarvis ask` in process vs direct ollama-client process (scripted engine)",
            ours,
            "ms",
            baseline=base,
            baseline_name="python -c ollama.Client().chat()",
            target="<= 60 ms more at p50",
            passed=ours - base <= 60,
            notes=f"overhead {ours - base:+.0f} ms at p50; p95 "
            f"{percentile(times['jarvis'], 95) * 1000:.0f} vs "
            f"{percentile(times['direct'], 95) * 1000:.0f} ms; whole processes, interleaved",
        )
    ]


def _embedded_row(env: BenchEnv) -> list[Row]:
    """Real inference: `jarvis ask` on the embedded engine against a script that loads
    the same GGUF with llama_cpp and asks the same question."""
    from jarvisd.catalog import get_entry, model_file

    real_models = os.environ.get("JARVIS_BENCH_MODELS_DIR")
    entry = get_entry("smollm2-135m")
    path = model_file(entry, Path(real_models) if real_models else None)
    if not path.is_file():
        return [Row("`jarvis ask` embedded", float("nan"), "s", notes=f"model not pulled: {path}")]
    direct = textwrap.dedent(f"""
        import llama_cpp
        llm = llama_cpp.Llama(model_path={str(path)!r}, n_ctx=4096, verbose=False)
        r = llm.create_chat_completion(messages=[{{"role": "user", "content": "Name three primary colors."}}],
                                       temperature=0, max_tokens=48)
        print(r["choices"][0]["message"]["content"])
    """)
    process_env = dict(os.environ)
    process_env.pop("JARVIS_CONFIG_DIR", None)
    times = time_commands(
        {
            "jarvis": [env.jarvis_bin(), "ask", "--engine", "llamacpp", "--model", entry.name,
                       "--temperature", "0", "--max-tokens", "48", "--no-stream",
                       "Name three primary colors."],
            "direct": [sys.executable, "-c", direct],
        },
        env.runs(7, 3),
        env.warmups(),
        env=process_env,
    )  # fmt: skip
    ours, base = median(times["jarvis"]), median(times["direct"])
    return [
        Row(
            "`jarvis ask` embedded SmolLM2 vs direct llama_cpp script",
            ours,
            "s",
            baseline=base,
            baseline_name="python -c llama_cpp.Llama(...)",
            target="informational",
            passed=None,
            notes=f"overhead {(ours - base) * 1000:+.0f} ms at p50 (includes sha256 check skip via stamp)",
        )
    ]


def run(env: BenchEnv) -> list[Row]:
    return [*_help_row(env), *_ask_rows(env), *_embedded_row(env)]
