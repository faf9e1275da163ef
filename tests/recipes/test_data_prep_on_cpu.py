"""Data preparation scripts (recipes/data/) on small local fixtures written here; nothing is downloaded.

Each script's ``main(argv)`` runs with the documented arguments (``prepare_all.sh`` runs them all
as subprocesses, as on a cluster); the outputs are read back with pyarrow and with HF
``datasets`` (how verl's RLHFDataset loads parquet), and scored with the scorer the recipes use.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.paths import REPO_ROOT

ROOT = REPO_ROOT
DATA = ROOT / "recipes" / "data"
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'


@pytest.fixture(autouse=True)
def _scripts_importable(monkeypatch):
    """The scripts import their sibling ``verl_data``: put recipes/data on sys.path for the test only."""
    monkeypatch.syspath_prepend(str(DATA))
    yield
    sys.modules.pop("verl_data", None)


def run(script, *args):
    """Run ``recipes/data/<script>``'s ``main`` with CLI arguments; return its exit code."""
    spec = importlib.util.spec_from_file_location(f"_prep_{Path(script).stem}", DATA / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main([str(a) for a in args])


def ok(script, *args):
    assert run(script, *args) == 0


def read(path):
    return pq.read_table(path).to_pylist()


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def dapo_row(problem, answer, uid):
    """A row as in BytedTsinghua-SIA/DAPO-Math-17k and AIME-2024 (verl format)."""
    return {
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": DAPO_PREFIX + problem + DAPO_SUFFIX}],
        "ability": "MATH",
        "reward_model": {"style": "rule-lighteval/MATH_v2", "ground_truth": answer},
        "extra_info": {"index": uid},
    }


def assert_verl_schema(rows, data_source):
    for row in rows:
        assert row["data_source"] == data_source
        assert isinstance(row["prompt"], list) and row["prompt"][-1]["role"] == "user"
        assert all(set(m) == {"role", "content"} for m in row["prompt"])
        assert row["reward_model"]["style"] == "rule" and isinstance(row["reward_model"]["ground_truth"], str)
        assert isinstance(row["extra_info"]["index"], int)


def test_aime_dedup_to_30_problems(tmp_path):
    # 30 problems × 3 copies in shuffled order (the published file has 30 × 32 = 960 rows)
    problems = [(f"Find the remainder of {k}^{k} modulo 1000.", str(100 + k)) for k in range(30)]
    copies = [dapo_row(p, a, f"uuid-{k}-{c}") for c in range(3) for k, (p, a) in enumerate(problems)]
    copies[5]["prompt"][0]["content"] = copies[5]["prompt"][0]["content"].replace(" modulo", "  modulo")  # spacing
    src = tmp_path / "aime-2024.parquet"
    pq.write_table(pa.Table.from_pylist(copies), src)

    out = tmp_path / "aime-2024-dedup.parquet"
    ok("prepare_aime2024.py", "--input", src, "--output", out)
    rows = read(out)
    assert len(rows) == 30
    assert_verl_schema(rows, "math_dapo")
    assert [r["reward_model"]["ground_truth"] for r in rows] == [a for _, a in problems]  # first-seen order
    assert [r["extra_info"]["index"] for r in rows] == list(range(30))
    assert rows[0]["prompt"][0]["content"] == DAPO_PREFIX + problems[0][0] + DAPO_SUFFIX

    # verl's default scorer for data_source=math_dapo (what the DAPO reward manager calls)
    from verl.utils.reward_score import default_compute_score

    good = default_compute_score("math_dapo", "… so the remainder is 100.\nAnswer: 100", "100")
    bad = default_compute_score("math_dapo", "Answer: 7", "100")
    assert (good["score"], good["acc"], bad["score"], bad["acc"]) == (1.0, True, -1.0, False)

    # the Paper A prompt variant keeps the same 30 problems
    out_r = tmp_path / "aime-2024-reasoning.parquet"
    ok("prepare_aime2024.py", "--input", src, "--template", "reasoning", "--output", out_r)
    rows_r = read(out_r)
    assert len(rows_r) == 30 and rows_r[0]["data_source"] == "aime2024"
    assert [m["role"] for m in rows_r[0]["prompt"]] == ["system", "user"]
    assert rows_r[0]["prompt"][1]["content"] == problems[0][0]


def test_aime_rejects_wrong_count_and_conflicts(tmp_path, capsys):
    rows = [{"problem": f"Problem {k}.", "answer": str(k)} for k in range(29)]  # plain layout, 29 problems
    src = write_jsonl(tmp_path / "aime.jsonl", rows + rows[:3])
    assert run("prepare_aime2024.py", "--input", src, "--output", tmp_path / "x.parquet") == 1
    err = capsys.readouterr().err
    assert "29 unique problems" in err and "--expect-problems 0" in err
    assert not (tmp_path / "x.parquet").exists()
    ok("prepare_aime2024.py", "--input", src, "--output", tmp_path / "y.parquet", "--expect-problems", "0")
    assert len(read(tmp_path / "y.parquet")) == 29

    conflict = write_jsonl(tmp_path / "c.jsonl", rows + [{"problem": "Problem 3.", "answer": "4"}])
    with pytest.raises(ValueError, match="different ground truths"):
        run("prepare_aime2024.py", "--input", conflict, "--output", tmp_path / "z.parquet", "--expect-problems", "0")


def test_dapo_math_keeps_rows_and_optional_dedup(tmp_path):
    rows = [dapo_row(f"Problem {k}.", str(k), f"u{k}") for k in range(4)]
    rows += [dapo_row("Problem 1.", "1", "u1-copy")]  # published rows repeat problems
    src = tmp_path / "dapo-math-17k.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)

    out = tmp_path / "all.parquet"
    ok("prepare_dapo_math.py", "--input", src, "--output", out)
    got = read(out)
    assert len(got) == 5  # upstream trains one epoch over the repeated rows: kept by default
    assert_verl_schema(got, "math_dapo")
    assert got[4]["extra_info"]["source_index"] == "u1-copy"
    assert got[0]["prompt"] == rows[0]["prompt"]

    out_d = tmp_path / "dedup.parquet"
    ok("prepare_dapo_math.py", "--input", src, "--output", out_d, "--dedup")
    assert [r["reward_model"]["ground_truth"] for r in read(out_d)] == ["0", "1", "2", "3"]

    # plain problem/answer rows get DAPO's prompt
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"problem": "What is 2+3?", "answer": "5"}])
    ok("prepare_dapo_math.py", "--input", plain, "--output", tmp_path / "plain.parquet")
    (row,) = read(tmp_path / "plain.parquet")
    assert row["prompt"][0]["content"] == DAPO_PREFIX + "What is 2+3?" + DAPO_SUFFIX


GSM8K_ROWS = [
    {"question": "Natalia sold 48 clips in April and half as many in May. How many in total?",
     "answer": "In May she sold 48/2 = <<48/2=24>>24 clips.\nTotal 48+24 = <<48+24=72>>72.\n#### 72"},
    {"question": "A shop has 1,200 pens and sells 200. How many are left?", "answer": "1200-200=1000\n#### 1,000"},
    {"question": "No marker here.", "answer": "The answer is 5."},
]


def test_gsm8k_prompt_answer_and_reward(tmp_path):
    src = tmp_path / "gsm8k_main"
    write_jsonl(src / "train.jsonl", GSM8K_ROWS)
    write_jsonl(src / "test.jsonl", GSM8K_ROWS[:1])
    out = tmp_path / "gsm8k_reasoning"
    ok("prepare_gsm8k.py", "--input", src, "--output-dir", out)

    from gtpo_verl.rewards.format_math import SYSTEM_PROMPT, compute_score

    train, test = read(out / "train.parquet"), read(out / "test.parquet")
    assert (len(train), len(test)) == (3, 1)
    assert_verl_schema(train, "openai/gsm8k")
    assert [r["reward_model"]["ground_truth"] for r in train] == ["72", "1,000", "5"]
    assert train[0]["prompt"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": GSM8K_ROWS[0]["question"]},
    ]
    assert test[0]["extra_info"]["split"] == "test"
    completion = "<reasoning>\n48 + 24 = 72\n</reasoning>\n<answer>72</answer>"
    assert compute_score("openai/gsm8k", completion, train[0]["reward_model"]["ground_truth"])["score"] == 20.0

    # readable the way verl's RLHFDataset reads parquet
    import datasets

    ds = datasets.load_dataset("parquet", data_files=str(out / "train.parquet"), split="train")
    assert ds[0]["prompt"][1]["content"] == GSM8K_ROWS[0]["question"]


MATH_ROWS = {
    "algebra": [{"problem": "Compute $1/2$.", "level": "Level 1", "type": "Algebra",
                 "solution": r"It is $\boxed{\frac{1}{2}}$."}],
    "geometry": [{"problem": "Area?", "level": "Level 2", "type": "Geometry",
                  "solution": r"First $\boxed{3}$, then the area is $\boxed{4\sqrt{2}}$."}],
}


def test_math_boxed_answers(tmp_path):
    src = tmp_path / "hendrycks_math"
    for subset, rows in MATH_ROWS.items():
        write_jsonl(src / subset / "train.jsonl", rows)
        write_jsonl(src / subset / "test.jsonl", rows[:1])
    out = tmp_path / "math_reasoning"
    ok("prepare_math.py", "--input", src, "--output-dir", out)
    train = read(out / "train.parquet")
    assert_verl_schema(train, "EleutherAI/hendrycks_math")
    assert [r["reward_model"]["ground_truth"] for r in train] == [r"\frac{1}{2}", r"4\sqrt{2}"]  # last box, balanced
    assert train[0]["extra_info"]["type"] == "Algebra" and len(read(out / "test.parquet")) == 2

    out_o = tmp_path / "official"
    ok("prepare_math.py", "--input", src, "--output-dir", out_o, "--answer-extraction", "official")
    assert [r["reward_model"]["ground_truth"] for r in read(out_o / "train.parquet")] == [r"\frac{1", r"4\sqrt{2"]


@pytest.mark.skipif(not os.access("/bin/bash", os.X_OK), reason="needs bash")
def test_prepare_all_offline(tmp_path):
    aime = tmp_path / "aime.jsonl"
    write_jsonl(aime, [{"problem": f"P{k}", "answer": str(k)} for k in range(30)] * 2)
    dapo = write_jsonl(tmp_path / "dapo.jsonl", [{"problem": "What is 2+3?", "answer": "5"}])
    gsm = tmp_path / "gsm"
    write_jsonl(gsm / "train.jsonl", GSM8K_ROWS)
    write_jsonl(gsm / "test.jsonl", GSM8K_ROWS)
    math = tmp_path / "math"
    write_jsonl(math / "algebra" / "train.jsonl", MATH_ROWS["algebra"])
    write_jsonl(math / "algebra" / "test.jsonl", MATH_ROWS["algebra"])
    env = dict(os.environ, PYTHON=sys.executable, RAY_DATA_HOME=str(tmp_path / "home"), DAPO_INPUT=str(dapo),
               AIME_INPUT=str(aime), GSM8K_INPUT=str(gsm), MATH_INPUT=str(math))
    proc = subprocess.run(["bash", str(DATA / "prepare_all.sh")], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = tmp_path / "home" / "data"
    produced = sorted(str(p.relative_to(data)) for p in data.rglob("*.parquet"))
    assert produced == [
        "aime-2024-dedup.parquet", "aime-2024-reasoning.parquet", "dapo-math-17k.parquet",
        "gsm8k_reasoning/test.parquet", "gsm8k_reasoning/train.parquet",
        "math_reasoning/test.parquet", "math_reasoning/train.parquet",
    ]
    assert len(read(data / "aime-2024-dedup.parquet")) == 30
