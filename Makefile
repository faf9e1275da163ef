# make demo: the CPU end-to-end demo (docs/cpu_demo.md); make test: the test suite
.PHONY: demo test

demo:
	bash examples/cpu_demo/setup_venv.sh
	.venv-demo/bin/python examples/cpu_demo/run_demo.py

test:
	.venv/bin/python -m pytest
