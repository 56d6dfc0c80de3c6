"""`python -m server ...` is the `convoy` command; `python -m server frontend ...` is one of its
front-end worker processes, which loads only the front end."""

import sys

if sys.argv[1:2] == ["frontend"]:
    from server.frontend.worker import main as worker_main

    sys.exit(worker_main(sys.argv[2:]))

from server.cli import main

sys.exit(main())
