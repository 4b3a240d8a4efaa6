"""Issue 38, point 5: a controller without pydantic is told to install it, by every entry point.

Each case runs in a fresh interpreter in which pydantic cannot be imported (``sys.modules`` holds None
for it, as for a package that is not installed), and calls what a playbook or pipeline calls: the
spec filters, the datapath_apply action's spec loader and the datapath CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRELUDE = ("import sys\nsys.modules['pydantic'] = None\nsys.modules['pydantic_core'] = None\n"
           f"sys.path.insert(0, {str(REPO / '.collections')!r})\n")
CASES = {
    "validate filter": "from ansible_collections.aiinfra.datapath.plugins.filter import datapath as f\n"
                       "f.validate({'version': 1})\n",
    "node_plan filter": "from ansible_collections.aiinfra.datapath.plugins.filter import datapath as f\n"
                        "f.node_plan({'version': 1}, 'node1')\n",
    "datapath_apply action": "from ansible_collections.aiinfra.datapath.plugins.action import datapath_apply as a\n"
                             "a._cluster_spec()\n",
    "datapath CLI": "from ansible_collections.aiinfra.datapath.plugins.plugin_utils.cluster_spec import cli\n"
                    "sys.exit(cli.main(['validate', sys.argv[1]]))\n",
}


@pytest.mark.parametrize("name", list(CASES))
def test_missing_pydantic_says_install_it_on_the_controller(name: str, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yml"
    spec.write_text("datapath:\n  version: 1\n")
    proc = subprocess.run([sys.executable, "-c", PRELUDE + CASES[name], str(spec)], capture_output=True, text=True,
                          check=False, timeout=120, env=dict(os.environ, AIINFRA_DATAPATH_CACHE="off"))
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "install pydantic on the controller" in output, output
    assert "could not be read" not in output  # not reported as an error of the spec
    if name == "datapath CLI":
        assert proc.returncode == 2 and "Traceback" not in output
