import logging

import pytest
import torch

# CI has 2 cores; tests are small and run fastest without intra-op thread contention
torch.set_num_threads(2)
# skrl's trainers log at interpreter exit (atexit), after pytest has closed its streams
logging.raiseExceptions = False


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
