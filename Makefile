# Convenience targets over packaging/dev/setup.sh (which works without make, too).
.PHONY: setup demo test bench bench-quick lint
setup:
	bash packaging/dev/setup.sh
demo:
	bash packaging/dev/setup.sh --demo
test:
	bash packaging/dev/setup.sh --test
lint:
	.venv/bin/ruff check jarvisd tests runners benchmarks && .venv/bin/ruff format --check jarvisd tests runners benchmarks && .venv/bin/mypy
# The harness (CI-sized BFCL among its rows), then BFCL's whole AST sets, three ways
# (many hours on 2 cores: it writes benchmarks/results/bfcl.md as it goes).
bench: setup
	.venv/bin/python -m benchmarks.harness
	.venv/bin/python -m benchmarks.bench_bfcl --full
bench-quick: setup
	.venv/bin/python -m benchmarks.harness --quick
