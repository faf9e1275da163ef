"""Rule-based rewards used by the recipes, as verl custom reward functions (``compute_score``)."""
