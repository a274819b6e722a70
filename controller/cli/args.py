"""summaryctl's CliError and what raises one: the argument checks (run by argparse first),
Kubernetes failures, the SessionSummarizer a command names; and out(): how it prints."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from typing import Any, cast
from urllib.parse import urlsplit

from controller.api import DNS_LABEL, SECRET_NAME_PATTERN, StoreSpec
from controller.core.destinations import shown
from controller.core.naming import blank_session_id
from controller.core.text import ms_to_rfc3339, one_line, printable, without_surrogates

MAX_SESSION_ID = 1024  # the CRD's spec.sessionId maxLength
STORE_FLAGS = ("tenant", "database", "memory_collection", "summary_collection")  # StoreSpec's
FORBIDDEN = "forbidden: "
# An API server's 404 for a resource type it does not serve (no CRD), not for an object.
NO_SUCH_TYPE = ("404 page not found", "the server could not find the requested resource")


class CliError(Exception):
    """A failure with a message that says what to do; printed without a traceback."""


def _shown(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:60] + "...")


def out(*lines: object, err: bool = False) -> None:
    """Prints each of lines as one line (stderr with err): every summaryctl command prints
    through here, so no text a store, a cluster or an argument holds drives the terminal."""
    print(*map(printable, lines), sep="\n", file=sys.stderr if err else sys.stdout)


def shown_time(ms: object) -> str:
    return ms_to_rfc3339(int(ms)) if isinstance(ms, int | float) else "?"


def text_arg(value: str) -> str:
    """Text a memory or a request can carry: no bytes the shell could not decode."""
    if without_surrogates(value) != value:  # what UTF-8 cannot encode
        raise argparse.ArgumentTypeError(f"{_shown(value)} is not valid text (undecodable bytes)")
    return value


def session_id_arg(value: str) -> str:
    """A session id as memories carry it: the same rules as the CRD's spec.sessionId."""
    if blank_session_id(value):
        raise argparse.ArgumentTypeError("a session id must not be empty or only whitespace")
    if len(value) > MAX_SESSION_ID:
        raise argparse.ArgumentTypeError(
            f"a session id is at most {MAX_SESSION_ID} characters (got {len(value)})"
        )
    return text_arg(value)


def _dns_name(value: str, pattern: str, limit: int, what: str, chars: str) -> str:
    if len(value) > limit or not re.fullmatch(pattern, value):
        raise argparse.ArgumentTypeError(
            f"invalid {what} {_shown(value)}: {chars}, at most {limit} characters"
        )
    return value


def namespace_arg(value: str) -> str:
    return _dns_name(value, DNS_LABEL, 63, "namespace", "lowercase letters, digits and '-'")


def object_name_arg(value: str) -> str:
    chars = "lowercase letters, digits, '-' and '.'"
    return _dns_name(value, SECRET_NAME_PATTERN, 253, "object name", chars)


def positive_int_arg(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {_shown(value)}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {number})")
    return number


def seconds_arg(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {_shown(value)}") from None
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds (got {value})")
    return number


def store_name_arg(field: str, value: str) -> str:
    """A store flag (--tenant, --database, a collection): what StoreSpec takes for `field`."""
    if problem := StoreSpec.name_problem(field, value, _shown):
        raise argparse.ArgumentTypeError(problem)
    return value


def chroma_url_problem(url: str) -> str | None:
    """Why url cannot be a Chroma server address, or None. Anything beyond scheme, host
    and port would be silently ignored, so it is refused."""
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError when not a number or out of range
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("http", "https"):
        return "the scheme must be http or https (e.g. http://localhost:8000)"
    if not parts.hostname:
        return "no host"
    if any(c.isspace() or not c.isprintable() for c in parts.netloc):
        return "the host contains whitespace or control characters"
    if port == 0:
        return "port 0 is not a server port"
    if parts.username is not None or parts.password is not None:
        return "credentials in the URL are not used; put a token in CHROMA_TOKEN"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "only scheme, host and port are used; remove the path, query or fragment"
    if len(url) > StoreSpec.URL_MAX:
        return f"at most {StoreSpec.URL_MAX} characters"
    return StoreSpec.url_problem(url)


def check_chroma_url(url: str) -> str:
    if problem := chroma_url_problem(url):
        raise CliError(f"invalid Chroma URL {_shown(shown(url))}: {problem}")
    return url


def kube_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    from controller.config import in_pod  # loads the SSO_* settings: not at import
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


def summarizer_object(namespace: str, name: str) -> dict[str, Any]:
    """The SessionSummarizer namespace/name, or a CliError saying where it is not and which -n."""
    from controller.kube import client as kube

    if (found := kube_call(kube.get_summarizer, namespace, name)) is not None:
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
