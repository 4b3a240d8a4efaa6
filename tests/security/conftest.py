"""Attack tests (docs/security.md): one module per class of issue 36, each run through the real
module code against real files, real sockets on loopback addresses and real git repositories.

Every test here plays the hostile neighbour (a tenant's pod, a mirror, a stranger on the fabric, a
bad role variable) and asserts that the attack fails; run against the code before the fixes, each
one succeeds as the attacker, except test_model_cache_links.py's
``test_a_published_file_swapped_for_a_link_is_replaced_not_followed``, which guards what was
already right (the link fails the hash and is replaced). ``run_module`` is the unit tests'
(tests/unit/conftest.py): a module's ``main()`` in this process with real arguments.
"""

from __future__ import annotations

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
for path in (TESTS, os.path.join(TESTS, "unit", "plugins")):
    if path not in sys.path:
        sys.path.insert(0, path)

_spec = importlib.util.spec_from_file_location("datapath_unit_conftest", os.path.join(TESTS, "unit", "conftest.py"))
_unit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_unit)
run_module = _unit.run_module
