"""Kubernetes and store failures as summaryctl's one-line CliError, for every command and
for the settings it loads (one home, so neither imports the other)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from controller.cli.args import CliError


def kube_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    try:
        return fn(*args, **kwargs)
    except ConfigException as exc:
        raise CliError(
            f"no Kubernetes context ({exc}); set KUBECONFIG, or run `make cluster-up` for a "
            "local control plane"
        ) from exc
    except HTTPError as exc:
        raise CliError(f"cannot reach the Kubernetes API: {exc}") from exc
    except ApiException as exc:
        if exc.status == 404 and "the server could not find the requested resource" in (
            exc.body or ""
        ):
            raise CliError(
                "the SessionSummary CRD is not installed in this cluster: "
                "kubectl apply -f crds/ (or helm install the chart)"
            ) from exc
        if exc.status == 404:
            raise CliError(f"not found: {_api_message(exc)}") from exc
        if exc.status == 403:
            raise CliError(f"forbidden: {_api_message(exc)}") from exc
        if exc.status == 422:
            raise CliError(f"rejected by the API server: {_api_message(exc)}") from exc
        raise CliError(f"Kubernetes API error {exc.status}: {_api_message(exc)}") from exc


def _api_message(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message"))
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


def missing_collection(exc: Any) -> CliError:
    return CliError(f"{exc} (--{exc.role}-collection; reading never creates a collection)")


@contextlib.contextmanager
def store_errors() -> Iterator[None]:
    """Every way a store call fails, as a CliError naming what to fix."""
    from controller.store.errors import (
        CollectionNotFound,
        EmbeddingMismatch,
        InvalidStoreConfig,
        StoreUnavailable,
    )

    try:
        yield
    except CollectionNotFound as exc:
        raise missing_collection(exc) from exc
    except (StoreUnavailable, EmbeddingMismatch, InvalidStoreConfig) as exc:
        raise CliError(str(exc)) from exc
