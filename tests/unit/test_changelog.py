"""Issue 38, point 6: versions agree, and the changelog is made by antsibull-changelog from fragments.

* every fragment in changelogs/fragments/ passes `antsibull-changelog lint` (the format the other
  issues' fragments use: sections such as minor_changes and bugfixes, each a list of strings);
* CHANGELOG.md is exactly what `antsibull-changelog generate` writes from changelogs/changelog.yaml;
* galaxy.yml's version is the next release: newer than every released version in changelog.yaml;
* meta/runtime.yml's requires_ansible states only what CI tests: the ansible-core pinned in
  requirements.txt is its lower bound, and the installed ansible-core satisfies it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TOOL = os.path.join(os.path.dirname(sys.executable), "antsibull-changelog")


def _run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run([TOOL, *argv], cwd=str(cwd), capture_output=True, text=True, check=False, env=env,
                          timeout=300)


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def test_fragments_pass_antsibull_changelog_lint() -> None:
    assert list((REPO / "changelogs" / "fragments").glob("*.yml")), "no fragment"
    proc = _run("lint", cwd=REPO)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_lint_refuses_a_malformed_fragment(tmp_path: Path) -> None:
    copy = tmp_path / "collection"
    shutil.copytree(REPO / "changelogs", copy / "changelogs")
    shutil.copy(REPO / "galaxy.yml", copy / "galaxy.yml")
    (copy / "changelogs" / "fragments" / "99-bad.yml").write_text("minor_change:\n  - a section that does not exist\n")
    proc = _run("lint", cwd=copy)
    assert "99-bad.yml" in proc.stdout + proc.stderr and "minor_change" in proc.stdout + proc.stderr


def test_changelog_md_is_generated_from_changelog_yaml(tmp_path: Path) -> None:
    copy = tmp_path / "collection"
    shutil.copytree(REPO / "changelogs", copy / "changelogs")
    shutil.copy(REPO / "galaxy.yml", copy / "galaxy.yml")
    proc = _run("generate", cwd=copy)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (copy / "CHANGELOG.md").read_text() == (REPO / "CHANGELOG.md").read_text(), \
        "CHANGELOG.md is stale: run antsibull-changelog generate (never edit it by hand)"


def test_galaxy_version_is_the_next_release() -> None:
    galaxy = str(yaml.safe_load((REPO / "galaxy.yml").read_text())["version"])
    released = [str(v) for v in yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text())["releases"]]
    assert released and galaxy not in released
    assert all(_key(v) < _key(galaxy) for v in released), (galaxy, released)


def test_requires_ansible_states_what_ci_tests() -> None:
    from ansible.module_utils.compat.version import LooseVersion
    from ansible.release import __version__

    spec = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"]
    pinned = next(line.split("==")[1].strip() for line in (REPO / "requirements.txt").read_text().splitlines()
                  if line.startswith("ansible-core=="))
    bounds = {}
    for part in spec.replace(" ", "").split(","):
        op = part[:2] if part[:2] in (">=", "<=", "==", "!=") else part[:1]
        bounds[op] = part[len(op):]
    assert bounds[">="] == pinned, (spec, pinned)  # the oldest version it claims is the one CI runs
    assert LooseVersion(__version__) >= LooseVersion(bounds[">="]) and LooseVersion(__version__) < LooseVersion(
        bounds["<"])
