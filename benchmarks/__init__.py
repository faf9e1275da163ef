"""Benchmarks of gtpo_verl's advantage estimators and policy loss against verl's own (not installed)."""
