"""recipes/slurm/ray_on_slurm.sbatch executed with shadowed ``srun`` / ``ray`` / ``enroot`` /
``apptainer`` / ``scontrol`` (tests/support/launchers.py): how its steps share a container, what
each step asks Slurm for, how requeues are counted, and that it runs under bash 4.2's ``set -u``.

- pyxis: one named container per node, created on every node by one step before any other
  container step; ``ray start`` starts it, every ``ray status`` poll and the driver join it
  (``--container-name=<name>:exec``), so they see its /tmp/ray sockets; removed at the end.
- Apptainer: every Ray / driver step in ``apptainer exec`` of the image, the host's /tmp shared.
- Steps beside ``ray start`` ask for no GPUs (``--gres=none``, sbatch's GPU variables unset) and
  BESIDE_MEM_MB of memory; ``ray start`` gets the rest of the node (Slurm < 22.05 shares no memory).
- Watchdog requeues count against MAX_REQUEUES, preemptions (SLURM_RESTART_COUNT) do not.
- Arrays that may be empty expand in the form bash < 4.4 accepts under ``set -u``; with
  GTPO_OLD_BASH=<a bash 4.2 binary> every recipe script runs under it as under this bash.
"""

import os
import re
from pathlib import Path

import pytest
from support.launchers import SLURM_ENV, make_stub_bin, run_script, slurm_env
from support.paths import REPO_ROOT

SLURM = "recipes/slurm/ray_on_slurm.sbatch"
RECIPE = "recipes/dapo/run_dapo_token_qwen2.5_32b.sh"
IMAGE = "/shared/images/gtpo-verl.sqsh"
MOUNTS = "/shared:/shared"
NAME = "gtpo_verl_4242"  # the default container name: gtpo_verl_<job id>
NODE_MEM_MB = SLURM_ENV["SLURM_MEM_PER_NODE"]
BESIDE_MEM_MB = 16384


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    return make_stub_bin(tmp_path_factory.mktemp("stub_bin"))


def srun_steps(calls):
    """[(node or None for a step on every node, srun options, command argv), …] of every srun call."""
    steps = []
    for tool, _, _, argv in calls:
        if tool != "srun":
            continue
        i = 0
        while i < len(argv) and argv[i].startswith("-"):
            i += 2 if argv[i] in ("-w", "--nodelist", "-N", "-n") else 1
        options = argv[:i]
        node = options[options.index("-w") + 1] if "-w" in options else None
        steps.append((node, [o for o in options if o != node], argv[i:]))
    return steps


def kind_of(command):
    """What a step runs: "start", "status", "version", "driver", "hostname", "create", "cleanup",
    "folders" (the node-local folders), "sweep" (stale containers), "gloo" (the hostname's address)."""
    if command[:1] == ["apptainer"]:
        command = command[command.index("--pwd") + 3:]  # apptainer exec --nv --bind M --pwd D IMAGE cmd…
    elif command[:1] == ["env"]:
        command = command[1:]  # pyxis: through `env` (LaunchParameters=test_exec looks for the command on the host)
    if command[:2] == ["bash", "-c"]:
        return {"stale_sweep": "sweep", "gloo_check": "gloo"}[command[3]]
    head = command[:2]
    return {("ray", "start"): "start", ("ray", "status"): "status", ("ray", "--version"): "version",
            ("bash", RECIPE): "driver", ("hostname", "--all-ip-addresses"): "hostname", ("true",): "create",
            ("enroot", "remove"): "cleanup", ("mkdir", "-p"): "folders"}[tuple(head) if head[0] != "true" else ("true",)]


HOST_KINDS = ("hostname", "folders", "sweep", "gloo", "cleanup")  # steps that run on the host


def test_pyxis_steps_of_a_node_share_one_named_container_created_first(stubs, tmp_path):
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=RECIPE,
                             **slurm_env(tmp_path, CONTAINER_IMAGE=IMAGE, CONTAINER_MOUNTS=MOUNTS))
    assert proc.returncode == 0, proc.stderr
    steps = [(node, options, kind_of(command)) for node, options, command in srun_steps(calls)]
    in_container = [i for i, (_, options, _) in enumerate(steps) if any(o.startswith("--container-") for o in options)]
    create = in_container[0]
    node, options, kind = steps[create]
    mounts = next(o for o in options if o.startswith("--container-mounts=")).split("=", 1)[1]
    # the first container step creates it on all three nodes at once, in the foreground, from the image
    assert kind == "create" and node is None and {"--nodes=3", "--ntasks=3", "--ntasks-per-node=1"} <= set(options)
    assert f"--container-image={IMAGE}" in options and f"--container-name={NAME}" in options
    assert mounts.startswith(MOUNTS + ",") and "--overlap" not in options
    # only the host's address, the node-local folders and the sweep of stale containers before it, on the host
    assert [k for _, _, k in steps[:create]] == ["hostname", "folders", "sweep"]
    assert not any(o.startswith("--container-") for _, options, _ in steps[:create] for o in options)

    started, joined = set(), set()
    for node, options, kind in steps[create + 1:]:
        names = {o.split("=", 1)[1] for o in options if o.startswith("--container-name=")}
        if kind in HOST_KINDS:
            assert not names
            continue
        assert len(names) == 1 and names.pop().split(":")[0] == NAME, (node, kind, options)  # one container per node
        if kind in ("start", "version"):  # starts the node's container: image and mounts apply
            assert f"--container-name={NAME}" in options and f"--container-image={IMAGE}" in options
            assert f"--container-mounts={mounts}" in options
            if kind == "start":
                started.add(node)
        else:  # the polls and the driver join the running container of that node's `ray start`
            assert kind in ("status", "driver") and f"--container-name={NAME}:exec" in options, (kind, options)
            assert not [o for o in options if o.startswith(("--container-image", "--container-mounts"))]
            joined.add(node)
    # (`:exec` fails while the node's `ray start` has not started its container yet: that poll is retried)
    assert started == {"node01", "node02", "node03"} and joined == {"node01"}
    # removed from every node at the end (pyxis keeps named containers), under either container scope
    *_, (node, options, kind) = steps
    assert kind == "cleanup" and node is None and "--nodes=3" in options
    (remove,) = [argv for tool, _, _, argv in calls if tool == "enroot" and argv[0] == "remove"]
    assert remove[-2:] == [f"pyxis_{NAME}", f"pyxis_4242_{NAME}"] and remove[:2] == ["remove", "--force"]
    # a job that stops early (here: the image's Ray has no token auth) removes them too
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=RECIPE,
                             **slurm_env(tmp_path, CONTAINER_IMAGE=IMAGE, STUB_RAY_VERSION="2.49.1"))
    assert proc.returncode == 1
    assert [argv[:2] for tool, _, _, argv in calls if tool == "enroot" and argv[0] == "remove"] == [["remove", "--force"]]


def test_apptainer_runs_ray_and_the_driver_in_the_image_with_the_host_tmp(stubs, tmp_path):
    image = "/shared/images/gtpo-verl.sif"
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=RECIPE,
                             **slurm_env(tmp_path, APPTAINER_IMAGE=image, CONTAINER_MOUNTS=MOUNTS))
    assert proc.returncode == 0, proc.stderr
    kinds = []
    for node, options, command in srun_steps(calls):
        kind = kind_of(command)
        kinds.append(kind)
        assert not any(o.startswith("--container-") for o in options)
        if kind in HOST_KINDS:
            assert command[0] != "apptainer"
        else:
            assert command[:4] == ["apptainer", "exec", "--nv", "--bind"] and command[4].startswith(MOUNTS + ","), command
            assert command[5:8] == ["--pwd", str(REPO_ROOT), image]
    assert not {"create", "cleanup", "sweep"} & set(kinds) and kinds.count("start") == 3
    assert not [c for c in calls if c[0] == "enroot"]
    # without any container: nothing of either
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=RECIPE, **slurm_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert all(command[0] in ("hostname", "ray", "bash", "mkdir") for _, _, command in srun_steps(calls))
    assert not [c for c in calls if c[0] in ("enroot", "apptainer")]


def _srun_env_logger(tmp_path, stubs):
    """An srun in front of the stub that logs, per call, whether SLURM_GPUS_PER_NODE reached it."""
    extra = tmp_path / "env_bin"
    extra.mkdir()
    srun = extra / "srun"
    srun.write_text('#!/usr/bin/env bash\nargs="$*"; echo "${SLURM_GPUS_PER_NODE-unset} ${args//$\'\\n\'/ }" >> "${SRUN_ENV_LOG}"\n'
                    f'exec "{stubs}/srun" "$@"\n')
    srun.chmod(0o755)
    return f"{extra}:{stubs}:{os.environ['PATH']}"


@pytest.mark.parametrize("beside_mem", [None, 4096])
def test_steps_beside_ray_start_ask_for_no_gpus_and_little_memory(beside_mem, stubs, tmp_path):
    """sbatch --gpus-per-node=8 exports SLURM_GPUS_PER_NODE=8, which srun reads as an option."""
    log = tmp_path / "srun_env.log"
    extra = {"BESIDE_MEM_MB": beside_mem} if beside_mem else {}
    beside = beside_mem or BESIDE_MEM_MB
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=RECIPE, PATH=_srun_env_logger(tmp_path, stubs),
                             SRUN_ENV_LOG=log, **slurm_env(tmp_path, SLURM_GPUS_PER_NODE=8, **extra))
    assert proc.returncode == 0, proc.stderr
    seen = {}  # srun's arguments → what SLURM_GPUS_PER_NODE was in its environment
    for line in log.read_text().splitlines():
        gpus, _, args = line.partition(" ")
        seen.setdefault(args, set()).add(gpus)
    ray_mem = NODE_MEM_MB - beside
    for tool, _, _, argv in calls:
        if tool != "srun":
            continue
        ((node, options, command),) = srun_steps([(tool, "", "", argv)])
        (gpus,) = seen[" ".join(argv).replace("\n", " ")]
        if kind_of(command) == "start":  # the node's GPUs and CPUs, its memory less the beside steps'
            assert gpus == "8" and "--gres=none" not in options and "--overlap" not in options
            assert f"--mem={ray_mem}M" in options and "--cpus-per-task=64" in options
            assert f"--memory={ray_mem * 1024 * 1024}" in command
        elif node is None:  # on every node at once, before `ray start` or after it ends: the folders, the cleanup
            assert gpus == "unset" and "--gres=none" in options and "--mem=1024M" in options, (command, options)
            assert kind_of(command) in ("folders", "cleanup", "sweep")
        else:  # polls, the driver, the version check, the host's address and name resolution
            assert gpus == "unset" and "--gres=none" in options and f"--mem={beside}M" in options, (command, options)
            assert "--overlap" in options and not [o for o in options if o.startswith("--cpus-per-task")]


def test_node_memory_comes_from_scontrol_when_the_job_asks_for_all_of_it(stubs, tmp_path):
    """#SBATCH --mem=0 reaches the script as SLURM_MEM_PER_NODE=0; `scontrol show job -d` lists each node's Mem=."""
    job = ("JobId=4242 JobName=gtpo-verl\n   MinMemoryNode=0 MinTmpDiskNode=0\n"
           "   TRES=cpu=192,mem=3000000M,node=3,gres/gpu=24\n"
           "     Nodes=node[01-02] CPU_IDs=0-63 Mem=1000000 GRES=gpu:8(IDX:0-7)\n"
           "     Nodes=node03 CPU_IDs=0-63 Mem=990000 GRES=gpu:8(IDX:0-7)\n")
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=RECIPE,
                             **slurm_env(tmp_path, SLURM_MEM_PER_NODE=0, STUB_SCONTROL_JOB=job))
    assert proc.returncode == 0, proc.stderr
    assert ["show", "job", "-d", "4242"] in [argv for tool, _, _, argv in calls if tool == "scontrol"]
    starts = [options for _, options, command in srun_steps(calls) if kind_of(command) == "start"]
    assert len(starts) == 3 and all(f"--mem={990000 - BESIDE_MEM_MB}M" in options for options in starts)  # the smallest node
    # nothing to go by: one line naming the knob, before any step
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=RECIPE, **slurm_env(tmp_path, SLURM_MEM_PER_NODE=0))
    assert proc.returncode == 1 and "set NODE_MEM_MB" in proc.stderr and not srun_steps(calls)
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=RECIPE, **slurm_env(tmp_path, NODE_MEM_MB=500000))
    starts = [options for _, options, command in srun_steps(calls) if kind_of(command) == "start"]
    assert proc.returncode == 0 and all(f"--mem={500000 - BESIDE_MEM_MB}M" in options for options in starts)


def _requeued(calls):
    return [argv for tool, _, _, argv in calls if tool == "scontrol" and argv[:1] == ["requeue"]]


def test_watchdog_requeues_are_counted_apart_from_preemptions(stubs, tmp_path):
    text = (REPO_ROOT / SLURM).read_text()
    assert "#SBATCH --requeue" in text and "#SBATCH --open-mode=append" in text  # the log survives a requeue
    count = tmp_path / "requeues" / "4242"
    # the job was preempted five times before: those restarts do not use up the watchdog's requeues
    for n in (1, 2, 3):
        proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=RECIPE,
                                 **slurm_env(tmp_path, STUB_PYTHON_EXIT=3, SLURM_RESTART_COUNT=4 + n))
        assert proc.returncode == 3 and f"(watchdog requeue {n} of 3; Slurm restarts so far: {4 + n})" in proc.stderr
        (driver,) = [argv for tool, _, _, argv in calls if tool == "python3"]
        assert "trainer.resume_mode=auto" in driver  # the requeued driver resumes from its last checkpoint
        assert _requeued(calls) == [["requeue", "4242"]] and count.read_text().strip() == str(n)
    proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=RECIPE,
                             **slurm_env(tmp_path, STUB_PYTHON_EXIT=3, SLURM_RESTART_COUNT=8))
    assert proc.returncode == 3 and "after 3 watchdog requeues (MAX_REQUEUES=3): not requeued" in proc.stderr
    assert not _requeued(calls) and not count.exists()  # the job is over: its count goes
    # success and other failures are not requeued, and end the count
    for status in (0, 1):
        count.parent.mkdir(exist_ok=True)
        count.write_text("1\n")
        proc, calls = run_script(stubs, tmp_path, SLURM, RECIPE=RECIPE, **slurm_env(tmp_path, STUB_PYTHON_EXIT=status))
        assert proc.returncode == status and not _requeued(calls) and not count.exists()


# ---------------------------------------------------------------- bash 4.2 (RHEL/CentOS 7 hosts)
SHELL_SCRIPTS = sorted(p for p in (REPO_ROOT / "recipes").rglob("*") if p.suffix in (".sh", ".sbatch"))
# arrays these scripts expand bare, each never empty where it is expanded (bash < 4.4 aborts on an
# empty "${a[@]}" under `set -u`; every other array expands as ${a[@]+"${a[@]}"})
NEVER_EMPTY = {
    "nodes": "scontrol's host list of the allocation (${nodes[0]} is read first)",
    "ray_resources": "assigned two flags before any use",
    "node_steps": "expanded only under ((${#node_steps[@]}))",
    "container_start": "create_containers runs only with CONTAINER_IMAGE set, which fills it",
    "moved": "expanded only under ((${#moved[@]}))",
    "in_place": "assigned three folders before any use",
    "loopback": "expanded only under ((${#loopback[@]}))",
    "devices": "one entry per node, filled before any use",
    "install": "assigned the install command before any use",
    "main": "launch_main assigns `python3 -m …` first",
    "cmd": "every LAUNCHER branch assigns it, or returns",
    "ALGORITHM_ARGS": "every run_*.sh assigns its algorithm block (test below)",
    "TRAINER_TAIL": "recipes/common/trainer_tail.sh assigns its fifteen overrides",
}
BARE_ARRAY = re.compile(r'(?<![#!])\$\{([A-Za-z_]\w*)\[[@*]\](?![+:])')  # ${a[@]} / ${a[*]}, not ${#…}, ${!…}, slices, guards
GUARDED = re.compile(r'\$\{([A-Za-z_]\w*)\[@\]\+"\$\{\1\[@\]\}"\}')


def test_arrays_expand_in_the_form_bash_4_2_accepts():
    bare = []
    for path in SHELL_SCRIPTS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            for name in BARE_ARRAY.findall(GUARDED.sub("", line)):
                if name not in NEVER_EMPTY:
                    bare.append(f"{path.relative_to(REPO_ROOT)}:{number}: ${{{name}[@]}}")
    assert not bare, "possibly empty arrays expanded bare (write ${a[@]+\"${a[@]}\"}):\n" + "\n".join(bare)
    for script in (REPO_ROOT / "recipes").glob("*/run_*.sh"):
        block = re.search(r"^ALGORITHM_ARGS=\((.*?)^\)", script.read_text(), re.S | re.M)
        assert block and block.group(1).strip(), f"{script}: empty ALGORITHM_ARGS"


OLD_BASH = os.environ.get("GTPO_OLD_BASH")


@pytest.mark.skipif(not OLD_BASH, reason="set GTPO_OLD_BASH to a bash 4.2 binary (bash < 4.4 rules for set -u)")
def test_scripts_run_under_bash_4_2(stubs, tmp_path):
    import subprocess

    version = subprocess.run([OLD_BASH, "--version"], capture_output=True, text=True).stdout
    assert re.match(r"GNU bash, version 4\.[0-3]\.", version), version
    shim = tmp_path / "old_bash_bin"  # `bash` inside the scripts (the recipe the sbatch runs) is the old one too
    shim.mkdir()
    (shim / "bash").symlink_to(OLD_BASH)
    path = f"{shim}:{stubs}:{os.environ['PATH']}"
    runs = [
        (SLURM, {}), (SLURM, {"CONTAINER_IMAGE": IMAGE}), (SLURM, {"APPTAINER_IMAGE": "/shared/x.sif"}),
        (SLURM, {"RAY_AUTH": "disabled", "STUB_PYTHON_EXIT": 3}),
    ]
    for script, env in runs:
        proc, calls = run_script(stubs, tmp_path, script, bash=OLD_BASH, PATH=path, RECIPE=RECIPE,
                                 **slurm_env(tmp_path, **env))
        assert proc.returncode == env.get("STUB_PYTHON_EXIT", 0), (env, proc.stderr[-2000:])
        assert "unbound variable" not in proc.stderr and [c for c in calls if c[0] == "python3"], env
    for script in sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "recipes").glob("*/run_*.sh")):
        for env in ({}, {"LAUNCHER": "direct"}, {"DRY_RUN": 1}, {"SHIP_PACKAGE": 1}):
            proc, _ = run_script(stubs, tmp_path, script, bash=OLD_BASH, PATH=path, **env)
            assert proc.returncode == 0 and "unbound variable" not in proc.stderr, (script, env, proc.stderr[-2000:])
    proc, calls = run_script(stubs, tmp_path, "recipes/data/prepare_all.sh", bash=OLD_BASH, PATH=path,
                             RAY_DATA_HOME=tmp_path / "data")  # no local copies: the empty-array case
    assert proc.returncode == 0 and "unbound variable" not in proc.stderr, proc.stderr[-2000:]
    assert len([c for c in calls if c[0] == "python3"]) == 5
