"""The in-process lab: a tiny policy trained for hundreds of steps on locally built tasks, over
paired seeds, with verl's and gtpo_verl's registered estimators, transforms and losses
(``python -m gtpo_verl.lab``, docs/lab.md)."""
