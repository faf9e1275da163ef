"""Preflight: what would stop a run, checked on every node before any worker starts.

    gtpo-preflight [--config-name gtpo_trainer_cpu] <the same Hydra overrides as gtpo_verl.main>
    python -m gtpo_verl.tools.preflight ...                     # the same

``python -m gtpo_verl.main`` runs it first (``gtpo.preflight=false`` skips it). Pointed at a Ray
cluster (``RAY_ADDRESS`` or ``ray_kwargs.ray_init.address``), it runs one small task pinned to
each alive node, with the runtime environment verl's ``run_ppo`` would use; otherwise it checks
this machine, where verl would start its own Ray. Prints one line per check with its fix and
exits 1 if any check fails.

Checks: the config itself, with every start-up check training runs (``check_training_config``:
ours, verl's ``validate_config``, the registries; a bad config is one ``[FAIL] config`` line and the
node checks still run); the cluster accepts this process (Ray token authentication); gtpo_verl importable and
registered with verl; verl / vLLM / torch / transformers / TransferQueue versions (verl as pinned
in ``gtpo_verl/config/REQUIRED_VERL.txt``,
all equal across nodes, the GPU stack as verl 0.9.1's ``[vllm]`` extra pins it); GPUs registered
with Ray against ``trainer.nnodes × trainer.n_gpus_per_node``, and on each node the CUDA devices a
task *holding that node's GPUs* sees (what verl's workers will see: Ray blanks
``CUDA_VISIBLE_DEVICES`` in a task that holds none); flash-attn when the model loads with
``flash_attention_2`` (on the nodes that register GPUs); model folder and data files readable (a
parquet file whose footer does not parse fails here, not at the first batch); checkpoint folder
writable (created once here, by the driver, before the nodes are probed); no CPU-mode variable on a
GPU run; on a GPU run the cache folders (HF datasets, Triton, vLLM, torch.compile) writable on every
node, and on a multi-node one an InfiniBand device on every GPU node unless TCP is chosen
(``NCCL_IB_DISABLE=1``) and no hostname resolving to loopback unless ``GLOO_SOCKET_IFNAME`` is set;
wandb, when logged to, with a well-formed key and its server reachable, or offline; the run length
(``total_training_steps``) as verl will resolve it.

A node that does not answer within ``GTPO_PREFLIGHT_TIMEOUT_S`` seconds (default 180) is named:
a node whose Ray runs with another token or ``RAY_AUTH_MODE`` joins the cluster but refuses the
other nodes' requests, so its probe never starts; so does a node whose GPUs another job holds.
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import hydra
from omegaconf import OmegaConf

from gtpo_verl.tools import launch_checks, node_probe
from gtpo_verl.tools.cluster_probe import ClusterRefused, Node, cluster_address, probe_cluster, probe_timeout_s
from gtpo_verl.ray_auth import token_source
from gtpo_verl.tools.required_verl import PIN_FILE, required_verl
from gtpo_verl.trainer.settings import GTPOSettings


def _required_verl() -> tuple[str, dict[str, str]]:
    """The verl pin and its ``[vllm]`` GPU stack from the package's ``config/REQUIRED_VERL.txt`` (setup.py's source too)."""
    version, stack = required_verl((importlib.resources.files("gtpo_verl") / "config" / PIN_FILE).read_text())
    return version, {name: stack[name] for name in ("torch", "vllm", "transformers")}


# the verl pin, and its [vllm] GPU stack for where verl's own metadata is missing (gpu_stack_pins)
VERL_VERSION, GPU_STACK_FALLBACK = _required_verl()
MIN_TRANSFER_QUEUE = (0, 1, 10)  # verl 0.9.1's `[verl-core]` extra: TransferQueue>=0.1.10
AUTH_FIX = (
    "start every node and this shell with the same token: RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH=<the "
    "cluster's token file> (or RAY_AUTH_TOKEN) exported before `ray start`, `ray status`, `ray job submit` and "
    "the driver (recipes/slurm/ray_on_slurm.sbatch does this; docs/reproduce.md, section 1)"
)


class PreflightError(SystemExit):
    """Raised (exit status 1) when a check fails; the lines above it say which and how to fix."""

    def __init__(self, failed: list[str]):
        super().__init__(1)
        self.failed = failed

    def __str__(self) -> str:
        return f"preflight failed: {', '.join(self.failed)}"


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        status = "PASS" if self.ok else "FAIL"
        text = f"[{status}] {self.name}: {self.detail}"
        return text + (f" -> fix: {self.fix}" if not self.ok and self.fix else "")


# ---------------------------------------------------------------- config → what to check
def _as_list(value) -> list[str]:
    if value is None:
        return []
    if OmegaConf.is_list(value) or isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


def attn_implementation(config) -> str:
    model = config.actor_rollout_ref.model
    override = model.get("override_config", None) or {}
    return str(override.get("attn_implementation", "flash_attention_2"))  # verl workers/config/model.py default


def on_gpu(config) -> bool:
    return str(config.trainer.get("device", "cuda")) != "cpu"


def probe_request(config) -> dict:
    data = config.data
    return {
        "model_path": str(config.actor_rollout_ref.model.path),
        "data_files": _as_list(data.train_files) + _as_list(data.val_files),
        "checkpoint_dir": launch_checks.checkpoint_path(config),
        "need_flash_attn": on_gpu(config) and attn_implementation(config) == "flash_attention_2",
        "count_cuda": on_gpu(config),
        "check_wandb": launch_checks.uses_wandb(config),
        "wandb_proxy": config.trainer.get("wandb_proxy", None),
    }


def gpu_stack_pins() -> dict[str, str]:
    """torch / vLLM / transformers versions verl 0.9.1's ``[vllm]`` extra pins (what verl is tested with)."""
    pins = {}
    try:
        for requirement in importlib.metadata.requires("verl") or []:
            found = re.match(r'^(torch|vllm|transformers)==([\w.]+); extra == "vllm"$', requirement.strip())
            if found:
                pins[found.group(1)] = found.group(2)
    except importlib.metadata.PackageNotFoundError:
        pass
    return pins or dict(GPU_STACK_FALLBACK)


def dataset_rows(path: str) -> Optional[int]:
    """Row count of a parquet / json(l) file or folder of them, from metadata where possible (None: unknown)."""
    try:
        return _rows(path)
    except Exception:  # unreadable or corrupt: dataset_problem says which
        return None


def dataset_problem(path: str) -> Optional[str]:
    """Why verl could not read the data file ``path`` (a corrupt parquet footer, a folder without data), else None."""
    if "://" in path and not path.startswith("file://"):
        return None  # remote storage: verl copies it at start
    try:
        rows = _rows(path.removeprefix("file://"))
    except Exception as err:  # pyarrow raises ArrowInvalid for a file that is not parquet
        return f"{path} cannot be read as a dataset ({type(err).__name__}: {' '.join(str(err).split())[:200]})"
    if rows == 0:
        return f"{path} has no rows"
    return None


def _rows(path: str) -> Optional[int]:
    path = os.path.expanduser(path)
    if os.path.isdir(path):
        names = sorted(f for f in os.listdir(path) if f.endswith((".parquet", ".jsonl", ".json")))
        counts = [_rows(os.path.join(path, f)) for f in names]
        return sum(counts) if counts and None not in counts else None
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    if path.endswith(".jsonl"):
        with open(path, "rb") as f:
            return sum(1 for line in f if line.strip())
    return None


def resolve_total_training_steps(config) -> tuple[Optional[int], str]:
    """(steps, how) as verl 0.9.1's V1 trainer resolves them (trainer_base._init_dataloader)."""
    trainer = config.trainer
    if trainer.get("total_training_steps") is not None:
        return int(trainer.total_training_steps), "trainer.total_training_steps"
    files = _as_list(config.data.train_files)
    rows = [dataset_rows(p) for p in files]
    batch = config.data.get("train_batch_size")
    if not files or None in rows or not isinstance(batch, int) or batch < 1:
        return None, "not set, and the train files or data.train_batch_size cannot be read here: verl will use rows // data.train_batch_size × total_epochs"
    per_epoch = sum(rows) // batch
    steps = per_epoch * int(trainer.total_epochs)
    return steps, (
        f"not set: verl counts {sum(rows):,} rows // data.train_batch_size {config.data.train_batch_size} "
        f"× trainer.total_epochs {trainer.total_epochs}"
    )


# ---------------------------------------------------------------- this machine as the cluster
def probe_local(config) -> Node:
    """No cluster given: verl starts its own Ray on this machine, so this machine is the cluster."""
    report = node_probe.probe_node(probe_request(config))
    configured = (config.get("ray_kwargs", {}).get("ray_init", {}) or {}).get("num_gpus", None)
    gpus = float(configured) if configured is not None else float(report.get("cuda_devices", 0) or 0)
    return Node(name=f"this machine ({report['hostname']})", ray_gpus=gpus, report=report)


# ---------------------------------------------------------------- the checks
def refused_check(refused: ClusterRefused) -> Check:
    """The one line for a cluster that could not be joined (no node was checked)."""
    mode = os.environ.get("RAY_AUTH_MODE") or "unset"
    source = token_source() or "nowhere"
    detail = (f"the cluster at {refused.address} refused or did not answer this process "
              f"(RAY_AUTH_MODE={mode}, token from {source}): {refused.reason}")
    if "AuthenticationError" not in refused.reason and mode != "token":
        detail += "; a cluster started with RAY_AUTH_MODE=token drops clients that present no token"
    return Check("Ray cluster", False, detail, AUTH_FIX + "; or check that the head is up at that address")


def _per_node(nodes: list[Node], key: str) -> list[str]:
    return [f"{n.name}: {n.report[key]}" for n in nodes if n.report.get(key)]


def _count(value) -> int:
    """A count from the config, 0 where it is not a whole number (the config check names that key)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def config_check(config) -> Check:
    """The config with every start-up check of ``python -m gtpo_verl.main`` (no Ray, no worker)."""
    import copy
    import warnings

    from gtpo_verl.trainer.derive import derive_config
    from gtpo_verl.trainer.validation import check_training_config

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # they are logged; the line counts them
            derived = copy.deepcopy(config)  # checked as training would check it, the caller's config untouched
            derive_config(derived)
            given = check_training_config(derived)
    except ValueError as err:
        return Check("config", False, " ".join(str(err).split()), "set the key as the message says")
    return Check("config", True, f"valid for training ({len(given)} warning{'s' * (len(given) != 1)})")


def evaluate(config, nodes: list[Node], silent: list[str], checkpoint_error: Optional[str] = None) -> list[Check]:
    from gtpo_verl.plugin.losses import LOSS_NAME  # torch, as config_check's validation

    checks: list[Check] = [config_check(config)]
    answered = [n for n in nodes if n.report and "task_error" not in n.report]
    where = f"{len(answered)} node{'s' * (len(answered) != 1)}"
    if silent or len(answered) != len(nodes):
        broken = silent + [f"{n.name}: {n.report['task_error']}" for n in nodes if "task_error" in n.report]
        checks.append(Check(
            "nodes", False, f"no answer within {probe_timeout_s():g} s from {'; '.join(broken)}",
            "a node that rejects the cluster's token (its `ray start` ran with another RAY_AUTH_MODE or token) joins "
            "but refuses every request: " + AUTH_FIX + "; else its GPUs are held by another job, or its raylet is "
            "down (ray status, that node's raylet.out); then rerun",
        ))

    bad = _per_node(answered, "gtpo_verl")
    checks.append(Check(
        "gtpo_verl", not bad,
        "; ".join(bad) if bad else f"importable, estimators and {LOSS_NAME} loss registered with verl on {where}",
        "install it in the Python environment Ray runs on that node (`pip install -e .` from the shared checkout), "
        "or ship it with the job: LAUNCHER=ray SHIP_PACKAGE=1 (recipes/launch.sh)",
    ))

    problems = []
    versions = {n.name: n.report["versions"] for n in answered}
    for name, v in versions.items():
        if v.get("verl") != VERL_VERSION:
            problems.append(f"{name} has verl {v.get('verl')} (need {VERL_VERSION})")
    for key in ("verl", "torch", "vllm", "transformers", "ray", "TransferQueue"):
        seen = {v.get(key) for v in versions.values()}
        if len(seen) > 1:
            problems.append(f"{key} differs across nodes: " + ", ".join(f"{n}={v.get(key)}" for n, v in versions.items()))
    if on_gpu(config):
        for key, pin in gpu_stack_pins().items():
            off = [f"{n}={v.get(key)}" for n, v in versions.items() if (v.get(key) or "").split("+")[0] != pin]
            if off:
                problems.append(f"{key} is not {pin} (verl {VERL_VERSION}'s [vllm] pin) on " + ", ".join(off))
    for name, v in versions.items():
        queue = v.get("TransferQueue")
        if queue and tuple(int(p) for p in re.findall(r"\d+", queue)[:3]) < MIN_TRANSFER_QUEUE:
            problems.append(f"{name} has TransferQueue {queue} (verl {VERL_VERSION} needs >= "
                            f"{'.'.join(map(str, MIN_TRANSFER_QUEUE))}; requirements/gpu.txt pins it)")
    stack = next(iter(versions.values()), {})
    checks.append(Check(
        "versions", not problems,
        "; ".join(problems) if problems else
        f"verl {stack.get('verl')}, torch {stack.get('torch')}, vllm {stack.get('vllm')} on {where}",
        "use one environment on every node: verl's published image for 0.9.1 plus "
        "`pip install -c requirements/gpu.txt -e .` (docs/reproduce.md, section 1)",
    ))

    needed = _count(config.trainer.get("nnodes")) * _count(config.trainer.get("n_gpus_per_node"))
    registered = sum(n.ray_gpus or 0 for n in nodes)
    gpu_problems = []
    if registered < needed:
        gpu_problems.append(
            f"{registered:g} GPUs registered with Ray, the config needs trainer.nnodes × trainer.n_gpus_per_node = "
            f"{config.trainer.nnodes} × {config.trainer.n_gpus_per_node} = {needed} (verl aborts at start)"
        )
    if on_gpu(config):
        for n in answered:
            cuda = n.report.get("cuda_devices", 0)
            if n.ray_gpus and cuda < n.ray_gpus:
                seen = n.report.get("cuda_visible_devices", "?")
                gpu_problems.append(
                    f"{n.name} registers {n.ray_gpus:g} GPUs with Ray but a task holding them sees {cuda} CUDA "
                    f"device{'s' * (cuda != 1)} (CUDA_VISIBLE_DEVICES={seen!r}"
                    + (f"; {n.report['cuda_error']}" if n.report.get("cuda_error") else "") + ")"
                )
    checks.append(Check(
        "GPUs", not gpu_problems,
        "; ".join(gpu_problems) if gpu_problems else f"{registered:g} registered, {needed} needed",
        "start Ray on every node with the GPUs it really has (`ray start ... --num-gpus=8`, in the container that runs "
        "the workers, with the GPUs passed in: `--gpus all` / `apptainer --nv`; recipes/slurm/ray_on_slurm.sbatch "
        "waits for all of them), or set trainer.nnodes / trainer.n_gpus_per_node to the cluster",
    ))

    gpu_nodes = [n for n in answered if (n.ray_gpus or 0) > 0]  # the actor runs only where GPUs are registered
    if probe_request(config)["need_flash_attn"] and gpu_nodes:
        bad = _per_node(gpu_nodes, "flash_attn")
        checks.append(Check(
            "flash-attn", not bad,
            ("not importable, but the actor loads the model with attn_implementation=flash_attention_2 (verl's default): "
             + "; ".join(bad)) if bad else
            f"importable on {len(gpu_nodes)} GPU node{'s' * (len(gpu_nodes) != 1)} (attn_implementation=flash_attention_2)",
            "run in verl's published image, which carries flash-attn (docs/reproduce.md, section 1); "
            "or +actor_rollout_ref.model.override_config.attn_implementation=sdpa with use_remove_padding=False",
        ))

    bad = _per_node(answered, "model")
    checks.append(Check(
        "model path", not bad, "; ".join(bad) if bad else f"{config.actor_rollout_ref.model.path} readable on {where}",
        "download the model to the shared filesystem first and set MODEL_PATH / actor_rollout_ref.model.path to it",
    ))

    bad = [f"{n.name}: {why}" for n in answered for why in n.report.get("data", {}).values() if why]
    files = probe_request(config)["data_files"]
    if not bad:  # readable on every node: the driver (which reads them first) parses them
        bad = [why for why in map(dataset_problem, files) if why]
    checks.append(Check(
        "data files", not bad, "; ".join(bad) if bad else f"{len(files)} file(s) readable on {where}",
        "run recipes/data/prepare_all.sh into the shared filesystem, or set TRAIN_FILE / TEST_FILE (data.train_files / data.val_files)",
    ))

    bad = [f"this machine (the driver) cannot create it: {checkpoint_error}"] if checkpoint_error else []
    bad += _per_node(answered, "checkpoint")
    checks.append(Check(
        "checkpoint folder", not bad,
        "; ".join(bad) if bad else f"{config.trainer.default_local_dir} writable on {where}",
        "point CKPTS_DIR / trainer.default_local_dir at a writable folder on the shared filesystem",
    ))

    checks += [Check(*found) for found in (launch_checks.interconnect_check(config, answered),
                                           launch_checks.cache_check(config, answered),
                                           launch_checks.cpu_mode_check(config, answered),
                                           launch_checks.wandb_check(config, answered)) if found]

    steps, how = resolve_total_training_steps(config)
    checks.append(Check(  # informational: an unreadable train file already fails "data files"
        "total_training_steps", True, f"{steps} ({how})" if steps is not None else f"unknown ({how})",
    ))
    return checks


def run_preflight(config, out=None) -> list[Check]:
    """Run every check for ``config``, print one line each to ``out``; raise PreflightError on a failure."""
    out = out or sys.stdout
    address = cluster_address(config)
    # the run's checkpoint folder exists before any node probes it (created here once, removed after)
    with launch_checks.checkpoint_folder_for_probes(probe_request(config)["checkpoint_dir"]) as checkpoint_error:
        if address:
            print(f"preflight: probing every node of the Ray cluster at {address}", file=out, flush=True)
            try:
                nodes, silent = probe_cluster(config, address, probe_request(config))
            except ClusterRefused as refused:
                check = refused_check(refused)
                print(check.line(), file=out, flush=True)
                print("preflight: the cluster could not be joined: no node was checked", file=out, flush=True)
                raise PreflightError([check.name]) from None
        else:
            print("preflight: no Ray cluster given (RAY_ADDRESS unset): checking this machine", file=out, flush=True)
            nodes, silent = [probe_local(config)], []
    print(f"preflight: {len(nodes)} node{'s' * (len(nodes) != 1)}: " + "; ".join(n.name for n in nodes), file=out, flush=True)
    checks = evaluate(config, nodes, silent, checkpoint_error)
    for check in checks:
        print(check.line(), file=out, flush=True)
    failed = [c.name for c in checks if not c.ok]
    if failed:
        print(f"preflight: {len(failed)} of {len(checks)} checks failed ({', '.join(failed)})", file=out, flush=True)
        raise PreflightError(failed)
    print(f"preflight: all {len(checks)} checks passed", file=out, flush=True)
    return checks


def preflight_enabled(config) -> bool:
    return GTPOSettings.from_config(config).preflight


# an absolute path: a console script resolves a relative one as a Python package (gtpo_verl.config is none)
@hydra.main(config_path=str(Path(__file__).resolve().parents[1] / "config"), config_name="gtpo_trainer", version_base=None)
def main(config) -> None:
    from omegaconf.errors import OmegaConfBaseException

    try:
        run_preflight(config)
    except OmegaConfBaseException as err:  # a mandatory key left unset (`???`), a bad interpolation
        print(f"gtpo-preflight: config error: {' '.join(str(err).split())}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
