"""The page's panel kinds: each one registration that says which panels it makes from the run records
and how the page draws each (``line``, ``bars`` or ``table``); the page's script draws by that type alone.

A new kind is one decorated function::

    @panel_kind("final training score", place=6)
    def final_score(records):
        yield Panel("final training score", "last critic/score/mean", "bars", bars=tuple(...))

``place`` orders the page: kinds run in place order (then registration order), and a section stands
where the first panel naming it came from. A ``line`` panel whose series would hold single points is
drawn as bars instead (``page.drawable``), whichever kind made it.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from gtpo_verl.tools.panels import HEALTH_SECTION, VALIDATION_SECTION, panel_metrics, training_panels
from gtpo_verl.tools.report import context
from gtpo_verl.tools.report.record import RunRecord
from gtpo_verl.tools.report.samples import PREFIX as SAMPLES_PREFIX
from gtpo_verl.trainer.health_checks import HEALTH_CHECKS

DRAW_TYPES = ("line", "bars", "table")
LOGGED_VALIDATION = re.compile(r"^val-(?:core|aux)/(?P<src>.+)/(?:acc|reward|score)/mean@(?P<n>\d+)$")
SAMPLE_METRIC = re.compile(r"^samples/(?P<src>.+)/(?P<stat>pass|maj)@(?P<k>\d+)$")
FIRST_SCREEN = "first screen: reward, entropy, health"
VALIDATION_AT_END = "validation at the end of each run"
MECHANISM_SECTION = "mechanism (audit dumps)"
REWARD = "critic/score/mean"
# the shared panels drawn one chart per reward scale (docs/report.md, "Rewards on different scales")
REWARD_METRICS = frozenset({REWARD})


@dataclass(frozen=True)
class Panel:
    """One card of the page. ``line``: ``metrics`` over the steps, every run that logged them (only ``runs``
    when given); ``bars``: one bar per entry of ``bars`` (``{run, metric, step, value}``); ``table``:
    ``header`` and ``rows`` (numbers shown to 6 significant digits, None as —)."""

    section: str
    title: str
    draw: str
    metrics: tuple[str, ...] = ()
    runs: Optional[tuple[str, ...]] = None
    skip: tuple[tuple[str, str], ...] = ()
    """``line``: (run, metric) series left out of the chart (drawn as bars beside it)."""
    bars: tuple[dict, ...] = ()
    header: tuple[str, ...] = ()
    rows: tuple[tuple, ...] = ()
    note: Optional[str] = None

    def __post_init__(self):
        if self.draw not in DRAW_TYPES:
            raise ValueError(f"panel {self.title!r}: draw must be one of {DRAW_TYPES}, got {self.draw!r}")

    def page_form(self) -> dict:
        """What the page's script reads: the draw type and its own fields only."""
        out = {"draw": self.draw, "title": self.title}
        if self.metrics:
            out["metrics"] = list(self.metrics)
        if self.draw == "line":
            if self.runs is not None:
                out["runs"] = list(self.runs)
            if self.skip:
                out["skip"] = [list(pair) for pair in self.skip]
        elif self.draw == "bars":
            out["bars"] = [dict(bar) for bar in self.bars]
        else:
            out["header"], out["rows"] = list(self.header), [list(row) for row in self.rows]
        if self.note:
            out["note"] = self.note
        return out


@dataclass(frozen=True)
class PanelKind:
    name: str
    place: int
    panels: Callable[[Sequence[RunRecord]], Iterable[Panel]]
    folded: bool = False
    """Its sections are closed on the page and drawn when opened (every other metric)."""


PANEL_KINDS: dict[str, PanelKind] = {}


def register(kind: PanelKind) -> PanelKind:
    if kind.name in PANEL_KINDS:
        raise ValueError(f"panel kind {kind.name!r} is registered already")
    PANEL_KINDS[kind.name] = kind
    return kind


def panel_kind(name: str, place: int, folded: bool = False):
    """Register the decorated ``records -> panels`` function as the panel kind ``name``."""
    def registered(panels: Callable[[Sequence[RunRecord]], Iterable[Panel]]):
        register(PanelKind(name, place, panels, folded))
        return panels
    return registered


def ordered_kinds() -> list[PanelKind]:
    return sorted(PANEL_KINDS.values(), key=lambda kind: kind.place)  # stable: registration order within a place


def logged_names(records: Sequence[RunRecord]) -> set[str]:
    return set().union(*(record.metrics.values for record in records))


# ---- rewards on different scales
def scale_ceiling(largest: float) -> float:
    """The smallest of 1, 2, 5, 10, 20, 50, … at or above ``largest``."""
    for exponent in itertools.count():
        for step in (1, 2, 5):
            if largest <= step * 10 ** exponent:
                return float(step * 10 ** exponent)
    raise AssertionError("unreachable")


def reward_scale(record: RunRecord, metric: str) -> Optional[float]:
    values = record.metrics.values.get(metric)
    finite = values[np.isfinite(values)] if values is not None else np.empty(0)
    return scale_ceiling(float(np.abs(finite).max())) if finite.size else None


def by_reward_scale(section: str, title: str, metrics: Sequence[str], records: Sequence[RunRecord]) -> list[Panel]:
    """One line panel per reward scale the runs log on (a lone scale: one panel, titled as given), so a run
    scored 0–20 does not flatten the runs scored 0–1."""
    scales: dict[float, list[str]] = {}
    for record in records:
        found = [s for s in (reward_scale(record, m) for m in metrics) if s is not None]
        if found:
            scales.setdefault(max(found), []).append(record.name)
    note = (f"one chart per reward scale: each run is drawn with the runs whose largest |{', '.join(metrics)}| "
            "rounds up to the same one of 1, 2, 5, 10, 20, …, each chart on its own axis; values as logged")
    if len(scales) <= 1:
        return [Panel(section, title, "line", tuple(metrics), note=note if scales else None)]
    return [Panel(section, f"{title}: runs scored within ±{scale:g}", "line", tuple(metrics), runs=tuple(names), note=note)
            for scale, names in sorted(scales.items())]


# ---- the first screen: reward, entropy, health
@panel_kind("training reward", place=0)
def training_reward(records):
    return by_reward_scale(FIRST_SCREEN, "training reward", [REWARD], records)


@panel_kind("policy entropy", place=0)
def policy_entropy(records):
    yield Panel(FIRST_SCREEN, "policy entropy", "line", ("actor/entropy",))


def flag_summary(record: RunRecord, flags: Sequence[str]) -> str:
    """``on at 3 step(s), from step 12``, ``off``, or ``not logged`` for the 0/1 flags (any of them on)."""
    columns = [record.metrics.values[f] for f in flags if f in record.metrics.values]
    if not columns:
        return "not logged"
    on = np.any([column >= 0.5 for column in columns], axis=0)  # NaN ≥ 0.5 is False
    if not on.any():
        return "off"
    return f"on at {int(on.sum())} step(s), from step {int(record.metrics.steps[on][0])}"


@panel_kind("health at a glance", place=0)
def health_at_a_glance(records):
    checks = [f"gtpo/health/{check.name}" for check in HEALTH_CHECKS]
    watch = ["gtpo/entropy/collapse_warning", "gtpo/entropy/fall_warning"]
    rows = tuple((record.name, *(flag_summary(record, [flag]) for flag in checks), flag_summary(record, watch),
                  len(record.warnings) + len(record.log_warnings)) for record in records)
    yield Panel(FIRST_SCREEN, "health at a glance", "table",
                header=("run", *checks, "entropy watch warned", "warnings (flags and logs, listed below)"), rows=rows)


# ---- validation
def validation_grids(names: set[str]) -> list[tuple[str, int]]:
    """``(data source, n)`` of every validation set the runs logged (verl's ``mean@n`` names), n ≥ 2."""
    grids = {(m["src"], int(m["n"])) for m in map(LOGGED_VALIDATION.match, names) if m}
    return sorted(grid for grid in grids if grid[1] >= 2)


@panel_kind("validation at the end", place=5)
def validation_at_end(records):
    """Each run's last validation of each set: mean@n and the unbiased pass@n at that step."""
    rows = []
    for record in records:
        for src, n in validation_grids(set(record.metrics.values)):
            mean = next((m for m in (f"val-core/{src}/acc/mean@{n}", f"val-core/{src}/reward/mean@{n}",
                                     f"val-core/{src}/score/mean@{n}", f"val-aux/{src}/acc/mean@{n}",
                                     f"val-aux/{src}/reward/mean@{n}", f"val-aux/{src}/score/mean@{n}")
                         if m in record.metrics.values), None)
            if mean is None:
                continue
            steps, values = record.metrics.series(mean)
            finite = np.isfinite(values)
            if not finite.any():
                continue
            last = np.flatnonzero(finite)[-1]
            step = int(steps[last])
            pass_steps, pass_values = record.metrics.series(f"val-gtpo/{src}/pass@{n}")
            at = np.flatnonzero(pass_steps == step)
            pass_n = float(pass_values[at[0]]) if at.size and np.isfinite(pass_values[at[0]]) else None
            rows.append((record.name, f"{src} (n = {n})", step, float(values[last]), pass_n))
    if rows:
        yield Panel(VALIDATION_AT_END, "last validation of each run", "table",
                    header=("run", "validation set", "step", "mean@n", "unbiased pass@n"), rows=tuple(rows))


@panel_kind("validation", place=10)
def validation(records):
    for src, n in validation_grids(logged_names(records)):
        section = VALIDATION_SECTION.format(src=src, n=n)
        for panel_section, title, metrics in panel_metrics(src, n):
            if panel_section == section:
                yield Panel(section, title, "line", tuple(metrics))


@panel_kind("validation recomputed from the samples", place=20)
def sample_panels(records):
    """pass@k / maj@n recomputed from the validation dumps, per data source, beside the logged ones."""
    by_source: dict[str, dict[str, list[int]]] = {}
    for match in filter(None, map(SAMPLE_METRIC.match, logged_names(records))):
        by_source.setdefault(match["src"], {}).setdefault(match["stat"], []).append(int(match["k"]))
    for src, stats in sorted(by_source.items()):
        section = f"validation recomputed from the samples ({src})"
        ks = sorted(stats.get("pass", []))
        yield Panel(section, "unbiased pass@k from the samples", "line", tuple(f"{SAMPLES_PREFIX}{src}/pass@{k}" for k in ks))
        if ks:
            n = ks[-1]
            yield Panel(section, f"pass@{n}: from the samples vs logged", "line",
                        (f"{SAMPLES_PREFIX}{src}/pass@{n}", f"val-gtpo/{src}/pass@{n}"))
        for k in sorted(stats.get("maj", [])):
            yield Panel(section, f"maj@{k}: from the samples vs logged", "line",
                        (f"{SAMPLES_PREFIX}{src}/maj@{k}", f"val-gtpo/{src}/maj@{k}"))


# ---- the shared panel list (tools/panels.py, what gtpo-dashboard saves to wandb)
@panel_kind("shared panels", place=30)
def shared_panels(records):
    for section, title, metrics in training_panels():
        if REWARD_METRICS.issuperset(metrics):
            yield from by_reward_scale(section, title, metrics, records)
        else:
            yield Panel(section, title, "line", tuple(metrics))


@panel_kind("health checks", place=30)
def health_checks(records):
    yield Panel(HEALTH_SECTION, "the checks behind gtpo/health/*", "table",
                header=("flag (1 = on)", "watches", "threshold", "what it means, and the key that fixes it"),
                rows=tuple((c["flag"], c["metric"], f"running mean ≥ {c['threshold']:g}", c["message"])
                           for c in context.health_table()))


@panel_kind("mechanism", place=40)
def mechanism(records):
    """The ``gtpo-mechanism`` table (``tools/mechanism.table_rows``) of every run with audit dumps: one column
    per run and dumped step."""
    dumped = [record for record in records if record.mechanism]
    if not dumped:
        return
    from gtpo_verl.tools.mechanism import table_rows

    header, columns = ["quantity"], []
    for record in dumped:
        header += [f"{record.name} · step {step['step']}" for step in record.mechanism["steps"]]
        columns.append(table_rows(record.mechanism["steps"]))
    rows = [[columns[0][i][0]] + [cell for table in columns for cell in table[i][1:]] for i in range(len(columns[0]))]
    dirs = "; ".join(f"{record.name}: {record.mechanism['dir']}" for record in dumped)
    yield Panel(MECHANISM_SECTION, "gtpo-mechanism on the audit dumps", "table", header=tuple(header),
                rows=tuple(map(tuple, rows)), note=f"gtpo-mechanism DIR on each run's dumps ({dirs}); docs/report.md")


# ---- every other metric
def namespace(metric: str) -> str:
    parts = metric.split("/")
    return "/".join(parts[:2]) if metric.startswith("val-") and len(parts) > 2 else parts[0]


@panel_kind("every other metric", place=90, folded=True)
def other_metrics(records):
    listed = {m for kind in PANEL_KINDS.values() if not kind.folded for panel in kind.panels(records) for m in panel.metrics}
    for metric in sorted(logged_names(records) - listed):
        yield Panel(f"every other metric: {namespace(metric)}/*", metric, "line", (metric,))
