"""The command-line tools: ``gtpo-preflight`` (with the per-node probe), ``gtpo-audit`` (the offline
entropy audit) and ``gtpo-dashboard`` (the wandb workspace); each also runs as
``python -m gtpo_verl.tools.<name>``."""
