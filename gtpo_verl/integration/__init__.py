"""The verl-facing layer: registration, config blocks, trainer integration (imports verl)."""
