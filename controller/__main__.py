"""`python -m controller run ...` starts the operator; anything else goes to summaryctl."""

import sys

if len(sys.argv) > 1 and sys.argv[1] == "run":
    from controller.operator import run

    run(sys.argv[2:])
else:
    from controller.cli import main

    sys.exit(main())
