"""The real-LM study's pieces that run without the model: its arms against the real CPU preset and
the package's start-up checks, its design against the pre-registration in docs/real_lm.md, its
endpoints and validation error from hand-made run data, and its scoring by hand (exact Wilcoxon,
Holm, the untestable rule), with a study stopped half-way resuming where it stopped."""

import json
import os

import pytest
from hydra import compose, initialize_config_dir

import gtpo_verl
from support.demo_modules import demo_module
from support.paths import REPO_ROOT

CONFIG_DIR = os.path.join(os.path.dirname(gtpo_verl.__file__), "config")
PAGE = (REPO_ROOT / "docs" / "real_lm.md").read_text()


@pytest.fixture(scope="module")
def study():
    return demo_module("lm_study")


def test_every_arm_composes_and_passes_the_start_up_checks(study, tmp_path):
    from support.run_files import write_run_files

    from gtpo_verl.trainer.derive import derive_config
    from gtpo_verl.trainer.validation import check_training_config

    root = write_run_files(tmp_path, train_rows=8, val_rows=8)
    args = study.parse_args(["--seed", "3", "--steps", "6", "--val-n", "8", "--val-prompts", "64",
                             "--model", str(root / "model")])
    for name, arm in study.ARMS.items():
        overrides = study.lm_overrides(args, str(root), name, str(tmp_path / name), knobs=list(arm.knobs),
                                       audit_steps=tuple(range(1, 7)))
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
            config = compose(config_name="gtpo_trainer_cpu", overrides=overrides)
        assert config.data.seed == 3 and config.actor_rollout_ref.rollout.seed == 3  # the pairing's seed
        assert config.actor_rollout_ref.rollout.val_kwargs.n == 8 and config.trainer.test_freq == 6
        assert config.algorithm.filter_groups.enable == (arm.family == "B")
        assert list(config.gtpo.audit.steps or []) == ([1, 2, 3, 4, 5, 6] if arm.audited else [])
        derive_config(config)
        check_training_config(config)  # every arm is a valid run (raises otherwise)
    token = lambda name: study.ARMS[name].knobs  # noqa: E731
    assert "algorithm.gtpo_token.alpha2=0" in token("DAPO_TOKEN_NO_ENTROPY")
    assert set(token("DAPO_TOKEN")) < set(token("DAPO_TOKEN_NO_ENTROPY"))  # the control differs by α₂ only
    assert set(token("GTPO_TRAJ_RATIO")) < set(token("GTPO_TRAJ_RATIO_NO_REG"))


def _table(section: str, header: str) -> list[list[str]]:
    """The rows of the markdown table under ``header`` (cells stripped of spaces and backquotes)."""
    lines = section[section.index(header):].splitlines()[2:]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([cell.strip(" `") for cell in line.split("|")[1:-1]])
    return rows


def test_the_code_is_the_pre_registration(study):
    """Every arm, family row and design number of the code is in the registered text, and no other."""
    section = PAGE[PAGE.index("## The study (pre-registered)"):]
    section = section[: section.index("\n## ", 4)]
    arms = _table(section, "| family | arm | what differs |")
    assert {(family, arm) for family, arm, _ in arms} == {(a.family, name) for name, a in study.ARMS.items()}
    families = _table(section, "| family | method − baseline | endpoint | direction |")
    registered = {(family, pair, endpoint, direction.split(" ")[0]) for family, pair, endpoint, direction in families}
    # each family under its project-wide id in the code, its registered name in the text
    assert set(study.REGISTERED_FAMILY_IDS.values()) == set(study.FAMILIES)
    name = {family_id: registered_name for registered_name, family_id in study.REGISTERED_FAMILY_IDS.items()}
    coded = {(name[family], f"{method}` − `{baseline}", endpoint, {1: "+", -1: "−", 0: "two-sided"}[direction].rstrip())
             for family, comparisons in study.FAMILIES.items() for method, baseline, endpoint, direction in comparisons}
    assert {(f, p, e, d.rstrip(";")) for f, p, e, d in registered} == coded
    assert study.STEPS == 6 and study.SEEDS == tuple(range(8)) and (study.VAL_PROMPTS, study.VAL_SAMPLES) == (64, 8)
    assert "6 steps" in section and "Seeds 0-7" in section and "64 held-out prompts" in section


def test_validation_by_prompt_and_its_sampling_error(study, tmp_path):
    folder = tmp_path / "validation"
    folder.mkdir()
    # two prompts of 4 samples: accuracies 1,1,0,0 and 1,1,1,1
    samples = [{"uid": f"p0_{k}_0", "acc": a} for k, a in enumerate((1.0, 1.0, 0.0, 0.0))]
    samples += [{"uid": f"p1_{k}_0", "acc": 1.0} for k in range(4)]
    (folder / "6.jsonl").write_text("\n".join(json.dumps(s) for s in samples) + "\n")
    out = study.validation_by_prompt(str(folder))
    # mean@4 = (0.5 + 1) / 2; SE = sqrt(var₀/4 + var₁/4) / 2 with var₀ = 1/3 (ddof 1), var₁ = 0
    assert out["mean"] == pytest.approx(0.75) and out["per_prompt"] == [0.5, 1.0]
    assert out["sampling_se"] == pytest.approx((1 / 3 / 4) ** 0.5 / 2)
    assert study.validation_by_prompt(str(tmp_path / "none")) == {}


def test_endpoints_are_the_registered_ones(study):
    record = {"validation": {"mean": 0.4},
              "series": {"critic/score/mean": [0.1, 0.2, 0.3, 0.5, 0.5, 0.6],
                         "gtpo/entropy/batch_mean": [2.4, 2.2, 2.0, 1.5, 1.4, 1.3],
                         "response_length/mean": [30, 28, 26, 20, 22, None]}}
    # steps 4-6: entropy (1.5 + 1.4 + 1.3)/3, length (20 + 22)/2 (a missing value is left out)
    assert study.endpoints(record) == pytest.approx({"val_acc": 0.4, "entropy": 1.4, "length": 21.0,
                                                     "reward_change": (0.5 + 0.5 + 0.6) / 3 - (0.1 + 0.2 + 0.3) / 3})
    # the two windows, each defined once: the registered 6 steps cut in half
    assert (study.FIRST_HALF, study.SECOND_HALF, study.SECOND_HALF_LABEL) == (slice(None, 3), slice(3, None), "steps 4-6")
    assert "averaged over steps 4-6" in PAGE and study.SECOND_HALF_LABEL in study.render({"arms": {}, "families": {}}, {}, {})


def test_the_committed_runs_keep_their_endpoints_and_their_scores(study):
    """Every committed run file's stored endpoints are what ``endpoints`` computes from its series, and the
    committed scores (read with their family ids, ``read_scores``) are what scoring the run files they list
    gives, exactly. Nothing is written: the run files are only read."""
    runs = study.load_runs(study.RUNS_DIR)
    assert runs and all(study.endpoints(run) == run["endpoints"] for run in runs)
    committed = study.read_scores(os.path.join(study.STUDY_DIR, "scores.json"))
    assert set(committed["families"]) == set(study.FAMILIES)
    scored = [r for r in runs if f"{r['arm']}__seed{r['seed']}" in committed["runs"]]
    result = study.score(scored)
    result.update(mechanism=study.mechanism_by_arm(scored), machine=study.machine_by_arm(scored),
                  runs=sorted(f"{r['arm']}__seed{r['seed']}" for r in scored))
    assert json.loads(json.dumps(result)) == committed


def _run(arm, seed, val_acc, entropy=2.0, length=20.0):
    return {"arm": arm, "seed": seed, "endpoints": {"val_acc": val_acc, "entropy": entropy, "length": length,
                                                     "reward_change": 0.0}}


def test_scoring_by_hand(study):
    runs = []
    for seed in range(8):
        runs.append(_run("DAPO", seed, 0.40 + 0.01 * seed))
        runs.append(_run("DAPO_TOKEN", seed, 0.60 + 0.01 * seed, entropy=1.0))  # +0.2 on every seed
        runs.append(_run("DAPO_TOKEN_NO_ENTROPY", seed, 0.60 + 0.01 * seed + (0.01 if seed % 2 else -0.01)))
    result = study.score(runs)
    rows = {(r["method"], r["baseline"], r["endpoint"]): r for family in result["families"].values() for r in family}
    claim = rows[("DAPO_TOKEN", "DAPO", "val_acc")]
    # 8 equal-sign differences: exact two-sided Wilcoxon p = 2/2⁸; Holm over the family's 3 rows present
    assert claim["p"] == pytest.approx(2 / 256) and claim["p_holm"] == pytest.approx(3 * 2 / 256)
    assert claim["verdict"] == "supported" and claim["testable"]
    control = rows[("DAPO_TOKEN", "DAPO_TOKEN_NO_ENTROPY", "val_acc")]
    assert control["verdict"] == "no difference detected" and control["p"] == pytest.approx(1.0)
    entropy = rows[("DAPO_TOKEN", "DAPO", "entropy")]  # entropy fell on every seed: Paper B's direction is +
    assert entropy["verdict"] == "contradicted"
    assert ("DAPO_TOKEN_ROW", "DAPO_TOKEN", "val_acc") not in rows  # not run: not in the family
    assert result["arms"]["DAPO"]["val_acc"]["mean"] == pytest.approx(0.435)


def test_too_few_pairs_are_untestable_never_no_difference(study):
    runs = [_run(arm, seed, v) for seed in range(2) for arm, v in (("DAPO", 0.4), ("DAPO_TOKEN", 0.9))]
    row = study.score(runs)["families"]["lm-B-accuracy"][0]
    assert row["seeds"] == 2 and not row["testable"] and row["verdict"] == "untestable at n = 2"


def test_a_stopped_study_resumes_where_it_stopped(study, tmp_path, monkeypatch):
    """Finished runs are files and are skipped; a run that fails writes nothing and is tried again."""
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    (runs_dir / "DAPO__seed0.json").write_text(json.dumps(_run("DAPO", 0, 0.5)))
    trained = []

    def fake_train(arm, seed, steps, data_dir, work, cluster, actor_dtype):  # stands in for the pipeline (needs the model)
        assert actor_dtype == "bf16"  # the registered study's actor
        trained.append((arm, seed))
        return None if (arm, seed) == ("DAPO_TOKEN", 1) else dict(_run(arm, seed, 0.5), steps=steps)

    monkeypatch.setattr(study, "train_one", fake_train)
    monkeypatch.setattr(study, "convert", lambda: None)
    monkeypatch.setattr(study, "write_splits", lambda *a, **k: None)
    rc = study.main(["--arms", "DAPO,DAPO_TOKEN", "--seeds", "0-1", "--runs-dir", str(runs_dir), "--work", str(tmp_path)])
    assert rc == 1  # one run did not finish
    assert trained == [("DAPO_TOKEN", 0), ("DAPO", 1), ("DAPO_TOKEN", 1)]  # seed by seed, the finished one skipped
    assert set(os.listdir(runs_dir)) == {"DAPO__seed0.json", "DAPO__seed1.json", "DAPO_TOKEN__seed0.json"}
    trained.clear()
    monkeypatch.setattr(study, "train_one", lambda arm, seed, *a: trained.append((arm, seed)) or _run(arm, seed, 0.5))
    assert study.main(["--arms", "DAPO,DAPO_TOKEN", "--seeds", "0-1", "--runs-dir", str(runs_dir),
                       "--work", str(tmp_path)]) == 0
    assert trained == [("DAPO_TOKEN", 1)]
    assert study.parse_seeds("0-2,5") == [0, 1, 2, 5]
    # a precision check: the same arm with the float32 actor, into its own folder
    dtypes = []
    monkeypatch.setattr(study, "train_one", lambda arm, seed, *a: dtypes.append(a[-1]) or _run(arm, seed, 0.5))
    assert study.main(["--arms", "DAPO_TOKEN", "--seeds", "0", "--runs-dir", str(tmp_path / "fp32"),
                       "--work", str(tmp_path), "--actor-dtype", "fp32"]) == 0
    assert dtypes == ["fp32"] and os.listdir(tmp_path / "fp32") == ["DAPO_TOKEN__seed0.json"]


def test_a_stop_file_pauses_the_study_between_runs(study, tmp_path, monkeypatch):
    trained = []
    monkeypatch.setattr(study, "train_one", lambda arm, seed, *a: trained.append((arm, seed)) or _run(arm, seed, 0.5))
    monkeypatch.setattr(study, "convert", lambda: None)
    monkeypatch.setattr(study, "write_splits", lambda *a, **k: None)
    (tmp_path / "STOP").touch()
    assert study.main(["--arms", "DAPO", "--seeds", "0-1", "--runs-dir", str(tmp_path / "runs"), "--work", str(tmp_path)]) == 0
    assert trained == [] and os.listdir(tmp_path / "runs") == []


def test_a_family_is_scored_on_the_seeds_complete_for_all_its_rows(study):
    runs = [_run(arm, seed, 0.4 + 0.1 * (arm == "DAPO_TOKEN")) for seed in range(8)
            for arm in ("DAPO", "DAPO_TOKEN", "DAPO_TOKEN_NO_ENTROPY")]
    runs.append(_run("DAPO", 8, 0.9))  # a seed only one arm finished: in no pair
    runs += [_run("DAPO_TOKEN_ROW", seed, 0.5) for seed in range(3)]  # a late arm enters with all its seeds only
    family = study.score(runs)["families"]["lm-B-accuracy"]
    assert [(r["method"], r["baseline"]) for r in family] == [("DAPO_TOKEN", "DAPO"), ("DAPO_TOKEN", "DAPO_TOKEN_NO_ENTROPY"),
                                                            ("DAPO_TOKEN_NO_ENTROPY", "DAPO")]
    assert all(r["seeds"] == 8 and r["paired_seeds"] == list(range(8)) for r in family)
    # a seed missing from one arm of the family drops from every row of it
    partial = [r for r in runs if not (r["arm"] == "DAPO_TOKEN_NO_ENTROPY" and r["seed"] == 7)]
    assert all(r["seeds"] == 7 for r in study.score(partial)["families"]["lm-B-accuracy"])


def test_the_scores_are_written_as_json_markdown_and_a_figure(study, tmp_path):
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    for seed in range(8):
        for arm, acc in (("DAPO", 0.4), ("DAPO_TOKEN", 0.6 + 0.01 * seed)):
            run = dict(_run(arm, seed, acc), wall_s=300.0 + seed,
                       machine_start={"load_1_5_15": [1.0, 1, 1], "mem_available_gib": 20.0},
                       machine_end={"load_1_5_15": [2.5, 1, 1], "mem_available_gib": 18.5})
            if arm == "DAPO_TOKEN":
                run["mechanism"] = [{k: 0.1 * (step + 1) for k in study.MECHANISM_KEYS} for step in range(3)]
            (runs_dir / f"{arm}__seed{seed}.json").write_text(json.dumps(run))
    result = study.write_scores(str(runs_dir), str(tmp_path))
    assert result["machine"]["DAPO"] == {"runs": 8, "wall_s_median": 303.5, "wall_s_range": [300.0, 307.0],
                                         "load_1min_range": [1.0, 2.5], "min_free_gib": 18.5}
    assert result["mechanism"]["DAPO_TOKEN"]["bonus_share_of_abs_advantage"] == pytest.approx(0.2)  # median of steps
    page = (tmp_path / "scores.md").read_text()
    assert "| `DAPO_TOKEN` − `DAPO` | val_acc | + | 8 |" in page and "**supported**" in page
    assert (tmp_path / "differences.png").stat().st_size > 1000 and json.loads((tmp_path / "scores.json").read_text())
