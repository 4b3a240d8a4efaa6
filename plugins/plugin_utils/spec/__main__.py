"""``python -m <package>``: the datapath CLI."""

import sys

from .cli import main

sys.exit(main())
