"""`python -m controller run ...` starts the operator, `python -m controller gate ...` the
bundled Chroma's token gate; anything else goes to summaryctl."""

import os
import sys


def one_blas_thread() -> None:
    """Set before numpy loads: the operator embeds on many threads at once, and BLAS's own
    threads on top only contend (docs/architecture.md)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def run_operator(argv: list[str]) -> None:
    one_blas_thread()
    from controller.operator import run  # an invalid SSO_* variable exits here, in one line

    run(argv)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        run_operator(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "gate":
        from controller.chroma_gate import main as gate

        sys.exit(gate(sys.argv[2:]))
    else:
        from controller.cli.main import main

        sys.exit(main())
