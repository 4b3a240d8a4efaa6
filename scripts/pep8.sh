#!/usr/bin/env bash
# ansible-test's pep8 sanity test in one second: the same pycodestyle version (pinned in
# requirements-test.txt to ansible-test's own), line length and ignore list (read from the
# installed ansible-test), over the Python files of this checkout. `make sanity` stays the
# reference; this runs in `make lint` so a continuation line never waits for CI to fail.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
ignore_file=$("$BIN/python" -c 'import ansible_test, pathlib; print(pathlib.Path(ansible_test.__file__).parent / "_util/controller/sanity/pep8/current-ignore.txt")')
ignore=$(grep -Ev '^\s*(#|$)' "$ignore_file" | paste -sd, -)
git ls-files -co --exclude-standard -- '*.py' | xargs "$BIN/python" -m pycodestyle --max-line-length 160 --ignore "$ignore"
