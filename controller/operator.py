"""The operator process: kopf settings and `python -m controller run`."""

from __future__ import annotations

import argparse
import logging
from typing import Any

import kopf

import controller.handlers  # noqa: F401  (registers the handlers)
from controller.config import CONFIG


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, logger: kopf.Logger, **_: Any) -> None:
    prefix = CONFIG.annotation_prefix
    # Progress and diff-base annotations under our own group, not kopf's shared prefix.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=prefix, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # Events come from handlers, not kopf's log.
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 16
    logger.info("replica %s starting", CONFIG.replica_id)


def run(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="session-summary-operator")
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="watch this namespace (repeatable); default: SSO_NAMESPACES or all",
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="no peering: this process is the only replica (local use)",
    )
    parser.add_argument(
        "--peering",
        default="session-summary-operator",
        help="kopf peering object name (dedicated, never kopf's 'default')",
    )
    parser.add_argument(
        "--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz"
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    namespaces = args.namespace or list(CONFIG.namespaces)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Chroma call otherwise
    kopf.run(
        clusterwide=not namespaces,
        namespaces=namespaces,
        standalone=args.standalone,
        # A dedicated peering object (mandatory: without its CRD the operator waits rather
        # than risk a second writer); none at all when standalone.
        peering_name=None if args.standalone else args.peering,
        liveness_endpoint=args.liveness,
    )
