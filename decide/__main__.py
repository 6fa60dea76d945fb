"""``python -m decide`` is the ``decide`` command."""

import sys

from decide.cli.main import main

sys.exit(main())
