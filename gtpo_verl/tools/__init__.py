"""The command-line tools: ``gtpo-preflight`` (with the per-node probe), ``gtpo-audit`` (the offline
entropy audit), ``gtpo-mechanism`` (what the methods' entropy terms do on the audited batches),
``gtpo-dashboard`` (the wandb workspace) and ``gtpo-report`` (the offline HTML report); each also runs
as ``python -m gtpo_verl.tools.<name>``. ``panels.py`` is the panel list the dashboard and the report
both draw; ``figures.py`` is the one figure writer (the lab's, the demos' and the study's figures);
``required_verl.py`` reads the verl pin (setup.py loads it too)."""
