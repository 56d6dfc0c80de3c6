"""`python -m server ...` is the `convoy` command."""

import sys

from server.cli import main

sys.exit(main())
