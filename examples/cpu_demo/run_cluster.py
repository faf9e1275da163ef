"""The cluster path on one machine: two real Ray nodes, FSDP2 world size 2, DAPO_TOKEN submitted
with `ray job submit` through recipes/launch.sh, dynamic sampling, balance_batch, dynamic batch
sizes, verl's padding rows, and the entropy audit (`python -m gtpo_verl.tools.audit`).

    make demo-cluster          # sets up .venv-demo, then runs this file with it
    .venv-demo/bin/python examples/cpu_demo/run_cluster.py [--steps 8] [--out outputs/demo_cluster]

Starts a head and a worker node with `ray start` (each one fake GPU and its own node resource,
`node_a` / `node_b`; Ray state in a private temp dir, so no other Ray instance on the machine
finds or joins it), submits the job, checks the audit, writes OUT/summary.json and OUT/report.html
(`gtpo-report` of the run, docs/report.md), and tears down exactly the processes it started
(never `ray stop`). Exits non-zero when a check fails.

Ray token authentication (`--auth token`, the default; Ray >= 2.52): the run writes its own token
(mode 0600, in the private temp dir) and hands it to both `ray start`s, the job submission and the
state queries through RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH; nothing is read from or written
to ~/.ray, so it works from a fresh HOME whichever Ray is installed. It then checks that a client
without the token is refused by the cluster and by the job API. `--auth disabled` runs without.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from run_demo import DAPO, RUNS, prepare_task  # noqa: E402

from gtpo_verl.cpu.launch import run_sizes  # noqa: E402
from gtpo_verl.ray_auth import write_token  # noqa: E402
from gtpo_verl.trainer.metrics_file import read_metrics_file  # noqa: E402

RUN = "DAPO_TOKEN"
# `ray_init` must not size an existing cluster (Ray refuses num_cpus/num_gpus when connecting)
CLUSTER = [
    "trainer.nnodes=2",
    "trainer.n_gpus_per_node=1",
    "ray_kwargs.ray_init.num_cpus=null",
    "ray_kwargs.ray_init.num_gpus=null",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",  # world size 2 / tp 1 = two rollout replicas
    # the two replicas generate at once on this machine's two cores: each keeps vLLM's default
    # reservation (one thread), where the CPU preset gives a lone replica every core
    "ray_kwargs.ray_init.runtime_env.env_vars.VLLM_CPU_NUM_OF_RESERVED_CPU='1'",
    "trainer.balance_batch=true",
    "actor_rollout_ref.actor.use_dynamic_bsz=true",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=512",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=512",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=512",
]
# the environment the CPU platform needs in every Ray process of the job (a single-node run gets it
# from the driver, whose environment the local Ray it starts inherits; a cluster's raylets do not).
# Both "nodes" share this machine's cores, so each FSDP rank computes on one thread (the platform
# would give each node's one rank every core, twice over).
CPU_ENV = {"GTPO_VERL_CPU": "1", "VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda", "VLLM_TARGET_DEVICE": "cpu",
           "GTPO_VERL_CPU_ACTOR_THREADS": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(roots: list[int]) -> list[int]:
    """Every live process below ``roots`` (from /proc parent links), roots included."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, stack = [], list(roots)
    while stack:
        pid = stack.pop()
        if pid not in found and os.path.exists(f"/proc/{pid}"):
            found.append(pid)
            stack.extend(children.get(pid, []))
    return found


def teardown(nodes: list[subprocess.Popen]) -> int:
    """Stop the processes this script started and everything they spawned; returns how many."""
    pids = descendants([p.pid for p in nodes])
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + grace
        while time.time() < deadline and any(os.path.exists(f"/proc/{pid}") and _alive(pid) for pid in pids):
            time.sleep(0.5)
        for p in nodes:
            try:
                p.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
        pids = [pid for pid in pids if _alive(pid)] + [q for q in descendants([p.pid for p in nodes]) if q not in pids]
        if not pids:
            break
    return len(pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cluster_state(gcs: str, dashboard: str, env: dict) -> dict:
    """Alive nodes (with their node resource) and every actor's class and node, from Ray itself."""
    code = (
        "import json, ray\n"
        "from ray.util.state import list_actors\n"
        f"ray.init(address={gcs!r}, logging_level='ERROR', log_to_driver=False)\n"
        "nodes = [{'id': n['NodeID'], 'alive': n['Alive'], 'resources': sorted(k for k in n['Resources'] if k.startswith('node_'))}"
        " for n in ray.nodes()]\n"
        f"actors = [{{'class': a.class_name, 'node': a.node_id, 'state': a.state}} for a in list_actors(address={dashboard!r}, limit=10000)]\n"
        "print('STATE' + json.dumps({'nodes': nodes, 'actors': actors}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    for line in out.stdout.splitlines():
        if line.startswith("STATE"):
            return json.loads(line[5:])
    raise RuntimeError(f"could not read the cluster state: {out.stderr[-2000:]}")


def wait_for_nodes(gcs: str, dashboard: str, env: dict, count: int, timeout: float) -> dict:
    deadline = time.time() + timeout
    while True:
        try:
            state = cluster_state(gcs, dashboard, env)
            if sum(n["alive"] for n in state["nodes"]) >= count:
                return state
        except (RuntimeError, subprocess.TimeoutExpired):
            if time.time() > deadline:
                raise
        if time.time() > deadline:
            raise RuntimeError(f"{count} Ray nodes did not come up within {timeout:.0f} s")
        time.sleep(3)


def ray_version() -> tuple[int, ...]:
    import importlib.metadata

    return tuple(int(p) for p in importlib.metadata.version("ray").split(".")[:2])


def refused_without_token(gcs: str, dashboard: str, env: dict, scratch: str) -> dict:
    """What the cluster answers a client that holds no token: `ray status`, and the job API over HTTP."""
    bare = {k: v for k, v in env.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    bare["HOME"] = scratch  # no ~/.ray/auth_token to fall back on
    status = subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "status", f"--address={gcs}"],
                            env=bare, capture_output=True, text=True, timeout=120)
    try:
        code = urllib.request.urlopen(f"{dashboard}/api/jobs/", timeout=30).status
    except urllib.error.HTTPError as exc:
        code = exc.code
    return {"ray_status_exit": status.returncode, "job_api_http_status": code}


def job_overrides(args, out: str, data_dir: str, model_dir: str, audit_dir: str) -> list[str]:
    """The job's Hydra overrides: DAPO_TOKEN as in the single-node demo, the cluster shape, the audit."""
    audit_steps = sorted({2, args.steps}) if args.steps >= 2 else [1]
    # no micro-batch sizes: dynamic batch sizes (CLUSTER) set the rows per forward pass
    sizes = run_sizes(data_dir, model_dir, prompts=args.prompts, group=args.group, mini_batch=args.mini_batch, lr=args.lr,
                      steps=args.steps, seed=1)
    return RUNS[RUN] + CLUSTER + sizes + [
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",  # the single-node demo validates; here the cluster path is the point
        "trainer.logger=[console,file]",
        "trainer.project_name=gtpo_cpu_demo",
        f"trainer.experiment_name={RUN}_cluster",
        f"trainer.default_local_dir={out}/checkpoints",
        "trainer.resume_mode=disable",
        # the audit: weights of step k-1 as an HF copy, through verl's own checkpoint options
        "trainer.save_freq=1",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        f"gtpo.audit.steps=[{','.join(map(str, audit_steps))}]",
        f"gtpo.audit.dir={audit_dir}",
    ]


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(ROOT, "outputs", "demo_cluster"))
    # near the warm start (success rate ≈ 0.5) all-equal groups are rare, and 4 steps may evict none
    # (docs/cpu_demo.md): 8 give the policy time to move off 0.5, and dynamic sampling a group to evict
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=6, help="train_batch_size; 6 × 4 rows are padded to 32")
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--mini-batch", type=int, default=4, help="ppo_mini_batch_size (prompts)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--timeout", type=int, default=1200, help="seconds for the job")
    parser.add_argument("--auth", choices=("token", "disabled"), default="token",
                        help="Ray token authentication for the cluster (token needs Ray >= 2.52)")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    started = time.time()

    data_dir, model_dir = prepare_task(out)

    audit_dir, metrics_path = os.path.join(out, "audit"), os.path.join(out, "metrics.jsonl")
    for stale in ("checkpoints", "audit"):  # a fresh run each time: nothing resumed or re-checked
        shutil.rmtree(os.path.join(out, stale), ignore_errors=True)
    if os.path.exists(metrics_path):
        os.remove(metrics_path)
    overrides = job_overrides(args, out, data_dir, model_dir, audit_dir)
    assert all(o in overrides for o in DAPO)  # the DAPO knobs of the single-node demo, dynamic sampling on

    temp_dir = tempfile.mkdtemp(prefix="gtpo_ray_")  # short: Ray's socket paths must fit 107 bytes
    gcs_port, dashboard_port = free_port(), free_port()
    gcs, dashboard = f"127.0.0.1:{gcs_port}", f"http://127.0.0.1:{dashboard_port}"
    # `ray` and `python3` on every PATH here (raylets, the job's entrypoint) are this interpreter's:
    # Ray starts its workers with the Python that ran `ray start`
    shim = os.path.join(temp_dir, "bin")
    os.makedirs(shim)
    with open(os.path.join(shim, "ray"), "w") as f:
        f.write(f'#!/bin/sh\nexec "{sys.executable}" -m ray.scripts.scripts "$@"\n')
    os.chmod(os.path.join(shim, "ray"), 0o755)
    path = os.pathsep.join([shim, os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    env["PATH"] = path
    env["RAY_AUTH_MODE"] = args.auth  # set either way: some Ray releases turn token auth on by default
    if args.auth == "token":
        if ray_version() < (2, 52):
            print(f"--auth token needs Ray >= 2.52 (this is {'.'.join(map(str, ray_version()))}): "
                  "install the pins (requirements/cpu-demo.txt) or pass --auth disabled", file=sys.stderr)
            shutil.rmtree(temp_dir, ignore_errors=True)
            return 2
        # every process of the run reads this file: the nodes, the job's workers, the submission
        env["RAY_AUTH_TOKEN_PATH"] = write_token(temp_dir)
    common = ["--num-cpus=16", "--num-gpus=1", "--block", "--disable-usage-stats"]  # logical CPUs (see the CPU preset)
    nodes: list[subprocess.Popen] = []
    summary: dict = {"run": RUN, "steps": args.steps, "auth": {"mode": args.auth}}
    failures: list[str] = []
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        with open(os.path.join(out, "head.log"), "w") as log:
            nodes.append(subprocess.Popen(
                [os.path.join(shim, "ray"), "start", "--head", f"--port={gcs_port}", f"--dashboard-port={dashboard_port}",
                 "--dashboard-host=127.0.0.1", "--include-dashboard=true", f"--temp-dir={temp_dir}",
                 '--resources={"node_a": 1}', f"--dashboard-agent-listen-port={free_port()}", *common],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        wait_for_nodes(gcs, dashboard, env, 1, 180)
        with open(os.path.join(out, "worker.log"), "w") as log:
            nodes.append(subprocess.Popen(
                [os.path.join(shim, "ray"), "start", f"--address={gcs}", '--resources={"node_b": 1}',
                 f"--dashboard-agent-listen-port={free_port()}", *common],  # two agents on one machine: own ports
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        before = wait_for_nodes(gcs, dashboard, env, 2, 180)
        summary["auth"].update(refused_without_token(gcs, dashboard, env, temp_dir))

        job_env = dict(CPU_ENV, VERL_FILE_LOGGER_PATH=metrics_path, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
        submit_env = dict(env, RAY_ADDRESS=f"http://127.0.0.1:{dashboard_port}",
                          RUNTIME_ENV_JSON=json.dumps({"env_vars": job_env}))
        # Hydra's saved config lands beside the metrics file: OUT is the run folder gtpo-report reads
        cmd = ["bash", os.path.join(HERE, "cluster_job.sh"), *overrides, f"hydra.run.dir={out}"]
        job_start = time.time()
        for attempt in range(20):  # the dashboard's job agent comes up some seconds after the node
            with open(os.path.join(out, "job.log"), "w") as log:
                log.write(" ".join(cmd) + "\n")
                log.flush()
                try:
                    rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=submit_env, cwd=ROOT,
                                        timeout=args.timeout).returncode
                except subprocess.TimeoutExpired:
                    rc = 124
            with open(os.path.join(out, "job.log")) as f:
                tail = f.read()[-4000:]
            if "No available agent to submit job" not in tail:
                break
            time.sleep(5)
        job_wall = time.time() - job_start
        succeeded = rc == 0 and "succeeded" in tail
        if not succeeded:
            failures.append(f"job: exit code {rc}, not reported succeeded (see {out}/job.log)")
        after = cluster_state(gcs, dashboard, env)

        rows = read_metrics_file(metrics_path).rows()
        train_rows = [r for r in rows if "timing_s/step" in r]
        step_times = [r["timing_s/step"] for r in train_rows]
        evicted = [int(r.get("training/filter_groups/evicted_samples", 0)) for r in train_rows]
        padding = [int(r.get("gtpo/batch/padding_rows", 0)) for r in train_rows]
        workers = [a for a in after["actors"] if "WorkerDict" in a["class"]]
        node_resources = {n["id"]: n["resources"] for n in after["nodes"]}
        summary.update(
            nodes=min(sum(n["alive"] for n in before["nodes"]), sum(n["alive"] for n in after["nodes"])),
            node_resources=sorted(r for n in after["nodes"] if n["alive"] for r in n["resources"]),
            world_size=len(workers),
            worker_nodes=sorted({r for a in workers for r in node_resources.get(a["node"], [])}),
            steps_completed=len(train_rows),
            evicted_groups_per_step=evicted,
            evicted_groups_total=sum(evicted),
            padding_rows_per_step=padding,
            padding_rows_total=sum(padding),
            dynamic_sampling=True,
            job_wall_s=round(job_wall, 1),
            seconds_per_step=round(sorted(step_times[1:])[len(step_times[1:]) // 2], 2) if len(step_times) > 1 else None,
            first_step_s=round(step_times[0], 1) if step_times else None,
            reward_first=train_rows[0].get("critic/score/mean") if train_rows else None,
            reward_last=train_rows[-1].get("critic/score/mean") if train_rows else None,
        )
    finally:
        left = teardown(nodes)
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(temp_dir, ignore_errors=True)
        summary["teardown_processes_left"] = left

    if os.path.isdir(audit_dir):
        audit = subprocess.run([sys.executable, "-m", "gtpo_verl.tools.audit", audit_dir], capture_output=True, text=True, cwd=ROOT)
        try:
            report = json.loads(audit.stdout)
            summary["audit"] = {k: report[k] for k in ("rows_checked", "tokens_checked", "padding_rows",
                                                       "entropy_max_abs_diff", "advantage_max_abs_diff", "passed")}
            summary["audit"]["steps"] = [s["step"] for s in report["steps"]]
        except (ValueError, KeyError):
            summary["audit"] = {"passed": False, "error": (audit.stdout + audit.stderr)[-2000:]}
    else:
        summary["audit"] = {"passed": False, "error": f"no dumps in {audit_dir}"}

    checks = {
        "nodes == 2": summary.get("nodes") == 2,
        "world_size == 2": summary.get("world_size") == 2,
        "workers on node_a and node_b": summary.get("worker_nodes") == ["node_a", "node_b"],
        f"steps_completed == {args.steps}": summary.get("steps_completed") == args.steps,
        "evicted_groups_total >= 1": summary.get("evicted_groups_total", 0) >= 1,
        "padding_rows_total >= 1": summary.get("padding_rows_total", 0) >= 1,
        "audit passed": bool(summary["audit"].get("passed")),
        "teardown left no process": summary["teardown_processes_left"] == 0,
    }
    if args.auth == "token":  # a client without the token gets nothing: neither the cluster nor the job API
        checks["unauthenticated client refused"] = (summary["auth"].get("ray_status_exit", 0) != 0
                                                    and summary["auth"].get("job_api_http_status") == 401)
    else:  # and off means off: the job API answers anyone
        checks["auth off: job API open"] = summary["auth"].get("job_api_http_status") == 200
    failures += [f"check failed: {name}" for name, ok in checks.items() if not ok]
    if os.path.exists(metrics_path):  # the offline page of the run (docs/report.md), beside summary.json
        from gtpo_verl.tools.report import ReportInputError, write_report

        try:
            write_report({f"{RUN}_cluster": out}, os.path.join(out, "report.html"), title=f"gtpo_verl cluster demo ({RUN})")
        except (ReportInputError, OSError) as error:
            failures.append(f"report.html: {error}")
    summary["checks"] = checks
    summary["wall_s"] = round(time.time() - started, 1)
    summary["failures"] = failures
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))
    for failure in failures:
        print("FAILED:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
