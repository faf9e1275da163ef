"""Example user package: an entropy-aware advantage estimator registered from its own plugin."""
