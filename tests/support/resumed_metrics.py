"""A metric file written by hand: a run that trained steps 1-3, was killed, resumed from its checkpoint
of step 1 and trained steps 2-4; the values every reader must return from it, worked out by hand from
the resume rule (``gtpo_verl.trainer.metrics_file.RESUME_RULE``: a step logged more than once keeps its
last write)."""

from __future__ import annotations

from pathlib import Path

LINES = (
    '{"step": 1, "data": {"timing_s/step": 1.0, "critic/score/mean": 0.10, "actor/entropy": 2.0}}',
    '{"step": 2, "data": {"timing_s/step": 1.0, "critic/score/mean": 0.20, "actor/entropy": 1.9}}',
    '{"step": 2, "data": {"val-core/acc": 0.50}}',  # verl logs a validation as a line of its own
    '{"step": 3, "data": {"timing_s/step": 1.0, "critic/score/mean": 0.30, "actor/entropy": 1.8, "gtpo/health/x": 1}}',
    '{"step": 1, "data": {"gtpo/resumed_from_step": 1}}',  # line 5: the resumed run's marker
    '{"step": 2, "data": {"timing_s/step": 2.0, "critic/score/mean": 0.25, "actor/entropy": 1.7}}',
    '{"step": 3, "data": {"timing_s/step": 2.0, "critic/score/mean": 0.35, "actor/entropy": 1.6}}',
    '{"step": 3, "data": {"val-core/acc": 0.60}}',
    '{"step": 4, "data": {"timing_s/step": 2.0, "critic/score/mean": 0.40, "actor/entropy": 1.5}}',
)
EXPECTED_STEPS = {
    # step 1 was trained once (the checkpoint): the first attempt's line
    1: {"timing_s/step": 1.0, "critic/score/mean": 0.10, "actor/entropy": 2.0},
    # step 2 was trained again: the second attempt's training metrics; the first attempt's validation
    # stays, since the second did not validate at step 2
    2: {"timing_s/step": 2.0, "critic/score/mean": 0.25, "actor/entropy": 1.7, "val-core/acc": 0.50},
    # step 3 was trained again: gtpo/health/x, which only the first attempt logged there, is superseded
    3: {"timing_s/step": 2.0, "critic/score/mean": 0.35, "actor/entropy": 1.6, "val-core/acc": 0.60},
    4: {"timing_s/step": 2.0, "critic/score/mean": 0.40, "actor/entropy": 1.5},
}
REPEATED_STEPS = [2, 3]
REWRITTEN = {2: 3, 3: 3}  # timing_s/step, critic/score/mean and actor/entropy written twice at steps 2 and 3
MARKER_LINE, RESUMED_FROM_STEP = 5, 1


def write_resumed_metrics(path: Path) -> Path:
    path.write_text("\n".join(LINES) + "\n")
    return path
