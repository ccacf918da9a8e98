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


@pytest.fixture(autouse=True)
def _run_in_tmp_path(tmp_path, monkeypatch):
    """Run every test in its own ``tmp_path``, so nothing lands in the user's working directory.

    Agents built without an ``experiment.directory`` (``cfg={}``) write TensorBoard logs and checkpoints to skrl's
    default ``os.getcwd()/runs``. Tests reach the repository's files through paths relative to ``__file__``.
    """
    monkeypatch.chdir(tmp_path)
    yield
