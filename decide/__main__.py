"""``python -m decide`` is the ``decide`` command."""

import sys

from decide.cli import main

sys.exit(main())
