"""A real local TransferQueue on a local Ray cluster (SimpleStorage, one unit), as the V1 trainer uses it."""

from __future__ import annotations

from typing import Iterator

# Overrides that switch the composed trainer config to TransferQueue with one storage unit.
TQ_OVERRIDES = (
    "transfer_queue.enable=true",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
)


def local_transfer_queue(tq_config) -> Iterator:
    """Start Ray (2 CPUs, this process's own local cluster) and TransferQueue; yield the module.

    Use as ``yield from local_transfer_queue(config.transfer_queue)`` in a module fixture.
    """
    import ray
    import transfer_queue as tq

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    tq.init(tq_config)
    try:
        yield tq
    finally:
        tq.close()
        ray.shutdown()
