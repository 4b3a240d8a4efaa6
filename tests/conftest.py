"""Shared pytest setup: make ``ansible_collections.aiinfra.datapath`` importable from the checkout."""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, ".collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "aiinfra", "datapath")

if not os.path.islink(LINK) and not os.path.isdir(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(os.path.relpath(REPO, os.path.dirname(LINK)), LINK)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
