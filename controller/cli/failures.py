"""Kubernetes failures as summaryctl's one-line CliError, and the lookup of the
SessionSummarizer a command names."""

from __future__ import annotations

import os
from typing import Any, cast

from controller.cli.args import CliError
from controller.config import in_pod
from controller.core.text import one_line

FORBIDDEN = "forbidden: "
# An API server's 404 for a resource type it does not serve (no CRD), not for an object.
NO_SUCH_TYPE = ("404 page not found", "the server could not find the requested resource")


def kube_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    from controller.kube.client import api_message

    try:
        return fn(*args, **kwargs)
    except ConfigException as exc:
        where = "the Pod's service account" if in_pod() else os.environ.get("KUBECONFIG", "")
        raise CliError(
            f"no Kubernetes context: cannot use {where or '~/.kube/config'} "
            f"({one_line(exc, 300)}); set KUBECONFIG, or run `make cluster-up` for a local "
            "control plane"
        ) from exc
    except HTTPError as exc:
        raise CliError(f"cannot reach the Kubernetes API: {exc}") from exc
    except ApiException as exc:
        if exc.status == 404 and any(said in (exc.body or "") for said in NO_SUCH_TYPE):
            raise CliError(
                "the operator's CRDs are not installed in this cluster: "
                "kubectl apply -f crds/ (or helm install the chart)"
            ) from exc
        said = {404: "not found: ", 403: FORBIDDEN, 422: "rejected by the API server: "}
        prefix = said.get(exc.status, f"Kubernetes API error {exc.status}: ")
        raise CliError(prefix + api_message(exc)) from exc


def summarizer_object(
    namespace: str, name: str, *, may_be_unreadable: bool = False
) -> dict[str, Any] | None:
    """The SessionSummarizer namespace/name, or a CliError naming the namespace and the -n
    to use; None when may_be_unreadable and this identity may not read it (the sunset role)."""
    from controller.kube import client as kube

    try:
        found = kube_call(kube.get_summarizer, namespace, name)
    except CliError as exc:
        if may_be_unreadable and str(exc).startswith(FORBIDDEN):
            return None
        raise
    if found is not None:
        return cast(dict[str, Any], found)
    try:  # where the SessionSummarizers are, and the -n to use
        others = kube_call(kube.list_summarizers, ())
    except CliError as exc:
        if not str(exc).startswith(FORBIDDEN):
            raise
        where = (
            "find yours (kubectl get sessionsummarizers -A) and pass its namespace: -n NAMESPACE"
        )
    else:
        places = [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in others]
        places.sort(key=lambda place: (not place.endswith(f"/{name}"), place))  # its name first
        same = [place.split("/")[0] for place in places if place.endswith(f"/{name}")]
        use = f"-n {same[0]}" if len(same) == 1 else "-n NAMESPACE --summarizer NAME"
        listed = ", ".join(places[:10]) or "none in any namespace"
        where = f"SessionSummarizers: {listed} (use {use})"
    raise CliError(f"no SessionSummarizer {name!r} in namespace {namespace!r}; {where}")
