"""How the estimators' equations run over a batch, without their math: the fused form of
``gtpo_token`` (``gtpo_token.py``, held to its readable twin in ``algorithms/token_shaping.py``), the
CPU row blocks and the masked first pass of ``grpo_s`` and ``gtpo_traj`` (``blocks.py``), and the
one-thread policy of an estimator call on the CPU (``threads.py``)."""
