"""The operator process: kopf settings and `python -m controller run`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import faulthandler
import functools
import gc
import importlib
import logging
import os
import random
import signal
import sys
import time
from typing import Any, cast

import kopf
from prometheus_client import start_http_server

import controller.handlers  # noqa: F401  (registers the handlers)
from controller import metrics
from controller.api import FINALIZER
from controller.config import CONFIG
from controller.core.text import printable
from controller.handlers.session_summary import Retry
from controller.kube.claims import ClaimCollector
from controller.kube.client import release_finalizers
from controller.kube.peering import (
    PRIORITY_STEP,
    ensure_peering_object,
    joining_priority,
    priority_conflicts,
    read_peering,
    watch_leader,
)
from controller.redaction import DEFAULT_REDACTION
from controller.runtime import PEERING_NAME, RunOptions, Runtime

log = logging.getLogger("controller.operator")


async def _trim_heap(interval: float = 30.0) -> None:
    """gc (retired clients are reference cycles) and malloc_trim (glibc keeps freed pages)."""
    malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", lambda pad: 0)  # none: not glibc
    while True:
        await asyncio.sleep(interval)
        await asyncio.to_thread(gc.collect)
        await asyncio.to_thread(malloc_trim, 0)


def _choose_priority(run: RunOptions) -> int:
    """SSO_PEERING_PRIORITY when set (an error if a live replica has it too), else below
    every live replica's (joining_priority)."""
    pinned = CONFIG.peering_priority
    if run.standalone:
        return 0 if pinned is None else pinned
    try:
        live = read_peering(run.peering, run.namespaces)
    except Exception as exc:  # nobody to rank below that we can see: the top
        log.warning("could not read the peering object at start: %s", exc)
        live = {}
    if pinned is None:
        return joining_priority(
            live, CONFIG.replica_id, random.SystemRandom().randint(1, PRIORITY_STEP)
        )
    if others := priority_conflicts(live, CONFIG.replica_id, pinned):
        log.error(
            "SSO_PEERING_PRIORITY=%d is also the priority of live replica(s) %s: kopf will "
            "pause all of them and nothing will be summarized; give each replica its own "
            "priority or leave SSO_PEERING_PRIORITY unset",
            pinned,
            ", ".join(others),
        )
    return pinned


async def _collect_abandoned_claims(interval: float) -> None:
    collector = ClaimCollector(default_duration_s=CONFIG.claim_ttl_seconds)
    while True:
        try:
            if deleted := await asyncio.to_thread(collector.collect):
                log.info("deleted %d abandoned session claims", deleted)
        except Exception as exc:  # the API server may be away for a while: next round
            log.warning("collecting abandoned claims failed: %s", exc)
        await asyncio.sleep(interval)


def status_diffbase() -> kopf.DiffBaseStorage:
    """kopf's diff base in the status: patched with it, saving a patch per pass."""
    return kopf.StatusDiffBaseStorage(field="status.lastHandledConfiguration")


class UnmarkedProgress(kopf.AnnotationsProgressStorage):
    """kopf's handler progress, read only for the spec generation it was written for: a new
    spec is acted on at once, not after its predecessor's retry backoff. The `kopf-managed`
    marker only rides on a patch removing a progress annotation: no patch of its own per
    object, none that empties the annotations (kopf would warn of "inconsistencies")."""

    def fetch(self, *, key: kopf.HandlerId, body: kopf.Body) -> kopf.ProgressRecord | None:
        record = dict(super().fetch(key=key, body=body) or {})
        if not record or record.pop("generation", None) != body.metadata.get("generation"):
            return None
        return cast(kopf.ProgressRecord, record)

    def store(
        self,
        *,
        key: kopf.HandlerId,
        record: kopf.ProgressRecord,
        body: kopf.Body,
        patch: kopf.Patch,
    ) -> None:
        stamped = {**record, "generation": body.metadata.get("generation")}
        super().store(key=key, record=cast(kopf.ProgressRecord, stamped), body=body, patch=patch)

    def _store_marker(self, prefix: str, patch: kopf.Patch, body: kopf.Body) -> None:
        if None in patch.metadata.annotations.values():
            super()._store_marker(prefix, patch, body)

    def purge(self, *, key: kopf.HandlerId, body: kopf.Body, patch: kopf.Patch) -> None:
        super().purge(key=key, body=body, patch=patch)
        self._store_marker(self.prefix, patch, body)


@kopf.on.startup()
async def configure(
    settings: kopf.OperatorSettings, logger: kopf.Logger, memo: kopf.Memo, **_: Any
) -> None:
    runtime = Runtime.of(memo)
    run, tasks = runtime.options, runtime.tasks
    settings.persistence.progress_storage = UnmarkedProgress(prefix=CONFIG.annotation_prefix)
    settings.persistence.diffbase_storage = status_diffbase()
    settings.persistence.finalizer = FINALIZER
    # Events go through the EventRecorder (one per state change, repeats counted).
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 16
    # List in pages and let idle workers exit soon: a whole listing never lives at once.
    settings.watching.chunk_size = CONFIG.list_chunk_size or None
    settings.queueing.idle_timeout = CONFIG.worker_idle_seconds
    settings.peering.lifetime = CONFIG.peering_lifetime
    # How soon kopf looks again whether a deleted summarizer's timers returned (60 s default).
    settings.background.cancellation_polling = 1.0
    # kopf may retry this handler: start each thing once.
    if CONFIG.metrics_port > 0 and runtime.metrics_server is None:
        addr = CONFIG.metrics_address
        runtime.metrics_server = start_http_server(CONFIG.metrics_port, addr=addr)[0]
        log.info("metrics on http://%s:%d/metrics", addr, runtime.metrics_server.server_port)
    metrics.set_build_info()
    for name, pool in runtime.scheduler.pools.items():  # read at every scrape
        metrics.QUEUE_DEPTH.labels(pool=name).set_function(pool.queue.waiting)
        metrics.IN_FLIGHT.labels(pool=name).set_function(pool.queue.holding)
    count = runtime.parts.count  # a part that only grows is a leak
    for part in count():
        read = functools.partial(lambda part: count()[part], part)
        metrics.RUNTIME_PARTS.labels(part=part).set_function(read)
    if not tasks:
        tasks.add(asyncio.create_task(_trim_heap(CONFIG.heap_trim_seconds)))
        tasks.add(asyncio.create_task(_collect_abandoned_claims(CONFIG.claim_collect_seconds)))
    if not run.standalone:  # standalone: watch_leader names this replica the leader at once
        await asyncio.to_thread(ensure_peering_object, run.peering, run.namespaces)
    settings.peering.priority = await asyncio.to_thread(_choose_priority, run)
    logger.info(
        "replica %s starting (peering %s, priority %d, lifetime %ds)",
        CONFIG.replica_id,
        "off (standalone)" if run.standalone else run.peering,
        settings.peering.priority,
        CONFIG.peering_lifetime,
    )
    tasks.add(asyncio.create_task(watch_leader(runtime, settings.peering.priority)))
    freeze_startup_objects()


# Imported by the first calls, not at the start, yet long-lived: frozen with the rest.
FIRST_CALLS_IMPORT = (
    "kubernetes.client.api.core_v1_api",
    "kubernetes.client.api.custom_objects_api",
    "httpcore",
    "pydantic.validate_call_decorator",
)


def freeze_startup_objects() -> int:
    """gc.freeze()s the startup objects, which every full collection would walk."""
    for name in FIRST_CALLS_IMPORT:
        with contextlib.suppress(ImportError):  # renamed by a later release: less frozen
            importlib.import_module(name)
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@kopf.on.cleanup()
async def begin_stopping(memo: kopf.Memo, **_: Any) -> None:
    """On SIGTERM: running passes are told to stop; our tasks end now."""
    runtime = Runtime.of(memo)
    runtime.stopping.set()
    for task in list(runtime.tasks):
        task.cancel()
    await asyncio.gather(*runtime.tasks, return_exceptions=True)
    runtime.tasks.clear()


def quiet_kopf(record: logging.LogRecord) -> bool:
    """kopf logs each timer run that succeeded (every tick of every SessionSummarizer), and
    each TemporaryError at ERROR from inside its `except`: those lines go, a Retry's too (the
    handler logged why at its own level)."""
    message = record.getMessage()
    succeeded = message.startswith("Timer ") and message.endswith(" succeeded.")
    return not succeeded and not isinstance(sys.exc_info()[1], Retry)


class OneLineFormatter(logging.Formatter):
    """A record's message on one line, control characters escaped, so no text can forge a
    record; a traceback's lines are indented (a line at column 0 begins a record). Masked by
    the default rules: an error a record quotes (a store's answer) may carry a credential."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))

    def format(self, record: logging.LogRecord) -> str:
        line, _, rest = super().format(record).partition("\n")  # rest: a traceback, a stack
        more = rest.split("\n") if rest else []
        return DEFAULT_REDACTION.text("\n".join([line, *("  " + printable(one) for one in more)]))


def configure_logging(verbose: bool) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    # One line per call otherwise: Chroma's (httpx), the model's and embeddings' (httpx2).
    for name in ("httpx", "httpx2"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("kopf.objects").addFilter(quiet_kopf)


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
        default=PEERING_NAME,
        help="kopf peering object name (dedicated, never kopf's 'default')",
    )
    parser.add_argument("--liveness", help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    namespaces = tuple(args.namespace or CONFIG.namespaces)
    configure_logging(args.verbose)
    os.environ["POD_ID"] = CONFIG.replica_id  # kopf's peering identity = ours
    # `kill -USR1 <pid>`: every thread's stack to stderr (docs/operations.md, a hung timer).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    runtime = Runtime.start(CONFIG, RunOptions(args.standalone, args.peering, namespaces))
    loop = asyncio.new_event_loop()
    try:
        kopf.run(
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=args.standalone,
            peering_name=None if args.standalone else args.peering,
            liveness_endpoint=args.liveness,
            memo=kopf.Memo(runtime=runtime),
            loop=loop,
        )
    finally:
        shut_down(runtime)
        loop.close()  # does not wait for threads still in a call (asyncio.run would)
    # Threads still blocked in a call would delay exit.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def shut_down(runtime: Runtime) -> None:
    """After kopf stops (docs/operations.md, "Shutdown")."""
    started = time.monotonic()
    runtime.stopping.set()  # running passes checkpoint and stop; queued ones are dropped
    left = runtime.scheduler.stop(CONFIG.shutdown_seconds)
    if left:
        log.warning(
            "%d summarization(s) still running after %.0fs: abandoned; their session claims "
            "lapse and the next replica resumes them",
            left,
            CONFIG.shutdown_seconds,
        )
    if runtime.options.standalone or runtime.leader == CONFIG.replica_id:
        try:
            if released := release_finalizers(runtime.options.namespaces, (FINALIZER,)):
                log.info("released the finalizer of %d SessionSummarizer(s)", released)
        except Exception as exc:  # the API server may be gone too: say it, still exit
            log.warning("could not release the SessionSummarizers' finalizer: %s", exc)
    runtime.close()
    log.info("stopped in %.1fs", time.monotonic() - started)
