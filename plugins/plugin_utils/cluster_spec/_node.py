"""The values the node derives too (``plugins/module_utils/_derived.py``), for the spec and the plan.

One file holds the MTU bounds, the RoCE MTU and ToS, the sysctl scope and the NVMe transport
words, so that the controller and the node can never disagree. Inside the collection it is
imported as module_utils; the ``datapath`` console script imports this package under another
name, outside ``ansible_collections``, and then loads the same file by its path.
"""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType


def _load() -> ModuleType:
    try:
        from ansible_collections.aiinfra.datapath.plugins.module_utils import _derived
    except ImportError:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            "module_utils", "_derived.py")
        found = importlib.util.spec_from_file_location("aiinfra_datapath_derived", path)
        if found is None or found.loader is None:  # pragma: no cover - the file ships with this package
            raise
        _derived = importlib.util.module_from_spec(found)
        found.loader.exec_module(_derived)
    return _derived


derived = _load()
