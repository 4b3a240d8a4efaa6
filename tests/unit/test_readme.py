"""The spec example in README.md validates (the README cannot drift from the models)."""

from __future__ import annotations

import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_readme_spec_example_is_valid(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with open(os.path.join(REPO, "README.md")) as fh:
        text = fh.read()
    start = text.index("```yaml\ndatapath:") + len("```yaml\n")
    example = text[start:text.index("```", start)]
    spec = tmp_path / "datapath.yml"
    spec.write_text(example)
    proc = subprocess.run([os.path.join(REPO, ".venv", "bin", "datapath"), "validate", str(spec)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
