"""``python -m malleable`` runs the ``malleable`` command."""

import sys

from malleable.cli import main

sys.exit(main())
