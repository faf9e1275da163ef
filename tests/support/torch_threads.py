"""torch's intra-op thread count set for a block and restored after it (the lab's workers run one thread)."""

from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(count: int):
    saved = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
