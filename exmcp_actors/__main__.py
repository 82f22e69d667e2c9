"""``python -m exmcp_actors watch ...``: the ``exmcp-watch`` command (see :mod:`exmcp_actors._cli`)."""

from __future__ import annotations

import sys

from ._cli import main

_USAGE = "usage: python -m exmcp_actors watch [options] [TARGET | -- COMMAND ARGS...]  (watch --help for more)"

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "watch":
        print(_USAGE, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[2:]))
