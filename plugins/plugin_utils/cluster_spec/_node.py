"""The values the node derives too (``plugins/module_utils/_derived.py``), for the spec and the plan.

One file holds the MTU bounds, the RoCE MTU and ToS, the sysctl scope and the NVMe transport
words, another node-feature-discovery's label rules (``_nfd_rules.py``), so that the controller
and the node can never disagree. Inside the collection they are imported as module_utils; the
``datapath`` console script imports this package under another name, outside
``ansible_collections``, and then loads the same files by their path.
"""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType


def _load(name: str = "_derived") -> ModuleType:
    """``plugins/module_utils/<name>.py`` (a stdlib-only file), from the collection or by its path."""
    try:
        return importlib.import_module("ansible_collections.aiinfra.datapath.plugins.module_utils." + name)
    except ImportError:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))),
                            "module_utils", name + ".py")
        found = importlib.util.spec_from_file_location("aiinfra_datapath" + name, path)
        if found is None or found.loader is None:  # pragma: no cover - the file ships with this package
            raise
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
    return module


derived = _load()
# node-feature-discovery's label rules: the same function checks the spec's label keys and the
# labels the nfd_labels module writes.
nfd_rules = _load("_nfd_rules")
