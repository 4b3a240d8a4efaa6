"""Throwaway OpenPGP keys and signed commits for the pull-mode tests (real gpg, real git).

Every key lives in a temporary GNUPGHOME of its own (never the user's keyring); keys are ed25519
without a passphrase, made with ``gpg --quick-generate-key`` (fast, no entropy wait).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_ID = ["-c", "user.name=pull-test", "-c", "user.email=pull-test@example.net"]


def gpg(home: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["gpg", "--batch", "--homedir", str(home), *args], input=input, capture_output=True,
                          text=True, timeout=120, check=True)


def make_key(home: Path, name: str) -> tuple[str, str]:
    """A new signing key in ``home``: (fingerprint, ASCII-armored public key)."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    uid = f"{name} <{name}@example.net>"
    gpg(home, "--passphrase", "", "--quick-generate-key", uid, "ed25519", "sign", "never")
    listing = gpg(home, "--with-colons", "--list-secret-keys", uid).stdout
    fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    return fingerprint, gpg(home, "--armor", "--export", fingerprint).stdout


def git(repo: Path, *args: str, home: Path | None = None) -> str:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    if home is not None:
        env["GNUPGHOME"] = str(home)
    done = subprocess.run(["git", "-C", str(repo), *GIT_ID, *args], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str, home: Path | None = None,
           fingerprint: str | None = None) -> str:
    """Write ``files`` into ``repo`` and commit them, signed with ``fingerprint`` from ``home``
    when given; returns the commit id."""
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    sign = [f"-S{fingerprint}"] if fingerprint else ["--no-gpg-sign"]
    git(repo, "commit", "-q", *sign, "-m", message, home=home)
    return git(repo, "rev-parse", "HEAD")


def new_repo(repo: Path) -> Path:
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    return repo
