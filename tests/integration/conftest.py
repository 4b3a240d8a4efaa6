"""Lab fixtures: a real lab of namespace nodes for the whole session, always torn down."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from datapath_lab import Lab, LabConfig  # noqa: E402
from labtools import TEST_LAB, LabHandle, _lab_possible  # noqa: E402


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    reason = _lab_possible()
    if reason:
        pytest.skip(reason)
    handle = Lab(TEST_LAB)
    inventory_dir = str(tmp_path_factory.mktemp("lab-inventory"))
    try:
        state = handle.up(LabConfig(name=TEST_LAB, nodes=4, nvme_size="1G", inventory_dir=inventory_dir),
                          log=lambda *_: None)
        yield LabHandle(handle, state)
    finally:
        handle.down(log=lambda *_: None)
