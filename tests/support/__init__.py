"""Shared test builders: batches, float64 references, comparisons, Hydra composition, actor configs.

Importable as ``support`` (pytest.ini puts ``tests/`` on ``sys.path``; a ``tests`` package
would clash with the one verl's wheel installs).
"""
