"""``python -m openagentcore.local``: the same as ``openagentcore dev``."""

from __future__ import annotations

import sys

from openagentcore.cli import main

if __name__ == "__main__":
    sys.exit(main(["dev", *sys.argv[1:]]))
