"""Research beside the lab (``python -m gtpo_verl.lab``): the seeded toy-scale study through the real
trainer (``python -m research.study``, docs/results.md) and its exploration task."""
