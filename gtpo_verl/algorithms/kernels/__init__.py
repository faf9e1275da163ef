"""Fused forms of the estimators' equations, scheduled over a batch without math of their own: GTPO's
(``gtpo_token.py``, held to its readable twin in ``algorithms/token_shaping.py``). They sit above
the equations and their helpers (``groups.py``, ``blocks.py``) and are called only by the
estimators' dispatch (``plugin/estimators/``)."""
