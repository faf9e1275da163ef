# make demo: the CPU end-to-end demo (docs/cpu_demo.md); make demo-cluster: the same stack on a
# two-node Ray cluster on this machine, with the entropy audit; make test: the test suite
.PHONY: demo demo-cluster test

demo:
	bash examples/cpu_demo/setup_venv.sh
	.venv-demo/bin/python examples/cpu_demo/run_demo.py

demo-cluster:
	bash examples/cpu_demo/setup_venv.sh
	.venv-demo/bin/python examples/cpu_demo/run_cluster.py

test:
	.venv/bin/python -m pytest
