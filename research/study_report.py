"""The study's tables and figure (``python -m research.study``): the claim table in the lab's form with the
study's columns, the per-method summary table and the curves, mean ± sample std over seeds."""

from __future__ import annotations

import numpy as np

from gtpo_verl.lab.report import family_table


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:+.{digits}f}"


# the study's columns beside the lab's: the per-seed differences, their signs, the sign test, the MDE
CLAIM_COLUMNS = (
    ("per seed (0, 1, 2, …)", lambda row: ", ".join(_fmt(v["difference"]) for v in row["per_seed"].values())),
    ("seeds as claimed", lambda row: f"{row['seeds_as_claimed']}/{row['seeds']}"),
    ("sign test p", lambda row: f"{row['sign_test_p']:.2f}"),
    ("MDE 80 %", lambda row: "n/a" if row["mde_80"] is None else format(row["mde_80"], ".3f")),
)


def claims_markdown(scored: dict) -> str:
    """The claim table of docs/results.md (the lab's table, ``gtpo_verl.lab.report.family_table``)."""
    title = "### The papers' claims (one direction each, Holm over all of them)"
    return "\n".join(family_table(title, scored["claims"], True, CLAIM_COLUMNS)).rstrip()


def draw(runs: dict, val_n: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("train", "reward", "training reward"), ("train", "actor_entropy", "actor/entropy"),
              ("train", "token_mean_entropy", "token-mean entropy (gtpo/entropy/batch_mean)"),
              ("train", "response_length", "response length"), ("validation", "pass@1", "validation pass@1"),
              ("validation", f"pass@{val_n}", f"validation pass@{val_n}")]
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    for axis, (part, name, title) in zip(axes.flat, panels):
        for method, seeds in runs.items():
            curves = [(r[part]["step"], r[part].get(name, [])) for r in seeds.values() if r[part]["step"]]
            if not curves:
                continue
            steps = sorted(set.intersection(*(set(s) for s, _ in curves)))
            table = np.array([[dict(zip(s, v)).get(x) for x in steps] for s, v in curves], dtype=float)
            if table.size == 0:
                continue
            mean = np.nanmean(table, axis=0)
            std = np.nanstd(table, axis=0, ddof=1) if len(table) > 1 else np.zeros_like(mean)
            axis.plot(steps, mean, marker="o" if part == "validation" else None, label=method)
            axis.fill_between(steps, mean - std, mean + std, alpha=0.2)
        axis.set_title(title)
        axis.set_xlabel("step")
    axes.flat[0].legend()
    fig.suptitle("mean ± sample std over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _cell(stat: dict | None, digits: int = 3) -> str:
    if not stat or stat.get("mean") is None:
        return "n/a"
    if stat.get("std") is None:  # one seed: no spread to give
        return f"{stat['mean']:.{digits}f} (1 seed)"
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"


def markdown_table(summary: dict, val_n: int) -> str:
    """The docs/results.md table: validation pass@1 / pass@n, entropy and reward, mean ± sample std over seeds."""
    columns = [
        ("step-0 pass@1", "step-0 pass@1"), ("final pass@1", "final pass@1"), ("best pass@1", "best pass@1"),
        (f"final pass@{val_n}", f"final pass@{val_n}"), (f"best pass@{val_n}", f"best pass@{val_n}"),
        (f"final maj@{val_n}", f"final maj@{val_n}"),
        ("actor/entropy, first 20 %", "actor_entropy first 20%"),
        ("actor/entropy, last 20 %", "actor_entropy last 20%"),
        ("token-mean entropy, last 20 %", "token_mean_entropy last 20%"),
        ("response length, first → last 20 %", ("response_length first 20%", "response_length last 20%")),
        ("training reward, last 20 %", "reward last 20%"),
        ("reward step-to-step std", "reward step-to-step std"),
        ("pass@1 drawdown", "pass@1 drawdown"),
    ]
    lines = ["| method | seeds | " + " | ".join(title for title, _ in columns) + " |",
             "|---|---:|" + "---:|" * len(columns)]
    for method, stats in summary.items():
        seeds = max((v.get("seeds", 0) for v in stats.values()), default=0)
        cells = [" → ".join(_cell(stats.get(k), 2) for k in key) if isinstance(key, tuple) else _cell(stats.get(key))
                 for _, key in columns]
        lines.append(f"| {method} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
