"""What ``import verl`` loads in every process (driver, TaskRunner, workers) through the ``verl.plugins``
entry point: the registration, the estimator table, the losses, the transforms, the estimator /
transform API and the algorithm config blocks. Kept light: verl's ``core_algos`` and the pure
algorithms only."""
