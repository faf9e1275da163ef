# make demo: the CPU end-to-end demo (docs/cpu_demo.md); make demo-cluster: the same stack on a
# two-node Ray cluster on this machine, with the entropy audit; make study: the seeded toy-scale
# study (docs/results.md, ~3 h on 2 cores); make test: the test suite; make check-latest: the test
# and demo environments rebuilt with the newest allowed versions, smoke-tested, and compared with
# the committed pins (requirements/, not in CI)
.PHONY: demo demo-cluster study test check-latest

demo:
	bash examples/cpu_demo/setup_venv.sh
	.venv-demo/bin/python examples/cpu_demo/run_demo.py

demo-cluster:
	bash examples/cpu_demo/setup_venv.sh
	.venv-demo/bin/python examples/cpu_demo/run_cluster.py

study:
	bash examples/cpu_demo/setup_venv.sh
	.venv-demo/bin/python -m research.study

test:
	.venv/bin/python -m pytest

check-latest:
	bash requirements/check_latest.sh
