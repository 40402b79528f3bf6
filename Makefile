# Convenience targets over packaging/dev/setup.sh (which works without make, too).
.PHONY: setup demo test bench lint
setup:
	bash packaging/dev/setup.sh
demo:
	bash packaging/dev/setup.sh --demo
test:
	bash packaging/dev/setup.sh --test
lint:
	.venv/bin/ruff check jarvisd tests runners benchmarks && .venv/bin/ruff format --check jarvisd tests runners benchmarks && .venv/bin/mypy
bench: setup
	.venv/bin/python -m benchmarks.harness
