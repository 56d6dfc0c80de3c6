"""`python -m server ...` is the `convoy` command; `python -m server tritonserver ...` is the
`tritonserver` command; `python -m server frontend ...` is one of the front-end worker processes,
which loads only the front end."""

import sys

if sys.argv[1:2] == ["frontend"]:
    from server.workers.process import main as worker_main

    sys.exit(worker_main(sys.argv[2:]))

from server.cli import main, tritonserver

sys.exit(tritonserver(sys.argv[2:]) if sys.argv[1:2] == ["tritonserver"] else main())
