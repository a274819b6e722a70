"""The local control plane is a real one: schema validation, status, watch, RBAC, admission."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from kubernetes import client, config, watch

from devenv.controlplane import ControlPlane
from devenv.processes import spawn, stop, wait_for

WIDGET_CRD = textwrap.dedent(
    """
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata:
      name: widgets.smoke.memorycore.io
    spec:
      group: smoke.memorycore.io
      scope: Namespaced
      names: {plural: widgets, singular: widget, kind: Widget}
      versions:
        - name: v1
          served: true
          storage: true
          subresources: {status: {}}
          additionalPrinterColumns:
            - {name: Size, type: integer, jsonPath: .spec.size}
            - {name: Seen, type: string, jsonPath: .status.seen}
          schema:
            openAPIV3Schema:
              type: object
              properties:
                spec:
                  type: object
                  required: [size]
                  properties:
                    size: {type: integer, minimum: 1, maximum: 10}
                status:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
    """
)


def widget(name: str, size: object) -> str:
    return json.dumps(
        {
            "apiVersion": "smoke.memorycore.io/v1",
            "kind": "Widget",
            "metadata": {"name": name, "namespace": "smoke"},
            "spec": {"size": size},
        }
    )


@pytest.fixture(scope="module")
def widgets(control_plane: ControlPlane) -> ControlPlane:
    cp = control_plane
    cp.kubectl_run("apply", "-f", "-", input=WIDGET_CRD)
    cp.kubectl_run(
        "wait", "--for=condition=Established", "crd/widgets.smoke.memorycore.io", "--timeout=60s"
    )
    cp.kubectl_run("create", "namespace", "smoke", check=False)
    return cp


def api_client(cp: ControlPlane) -> client.ApiClient:
    return config.new_client_from_config(str(cp.kubeconfig))


def test_server_reports_the_pinned_kubernetes_version(control_plane: ControlPlane) -> None:
    out = json.loads(control_plane.kubectl_run("version", "-o", "json").stdout)
    server, kubectl = out["serverVersion"], out["clientVersion"]
    assert server["gitVersion"].startswith("v1.3")
    assert abs(int(server["minor"]) - int(kubectl["minor"])) <= 1


def test_invalid_object_is_rejected_by_the_schema(widgets: ControlPlane) -> None:
    bad = widgets.kubectl_run("apply", "-f", "-", input=widget("too-big", 99), check=False)
    assert bad.returncode != 0
    assert "spec.size" in bad.stderr and "less than or equal to 10" in bad.stderr
    wrong_type = widgets.kubectl_run("apply", "-f", "-", input=widget("text", "x"), check=False)
    assert wrong_type.returncode != 0 and "spec.size" in wrong_type.stderr


def test_kubectl_get_lists_a_valid_object_with_printer_columns(widgets: ControlPlane) -> None:
    widgets.kubectl_run("apply", "-f", "-", input=widget("listed", 3))
    out = widgets.kubectl_run("-n", "smoke", "get", "widgets").stdout
    header, *rows = out.splitlines()
    assert header.split()[:2] == ["NAME", "SIZE"]
    assert any(r.split()[:2] == ["listed", "3"] for r in rows)


def test_status_is_a_subresource(widgets: ControlPlane) -> None:
    widgets.kubectl_run("apply", "-f", "-", input=widget("statusful", 2))
    api = client.CustomObjectsApi(api_client(widgets))
    # Writing status through the main resource is ignored; through /status it sticks.
    api.patch_namespaced_custom_object(
        "smoke.memorycore.io", "v1", "smoke", "widgets", "statusful", {"status": {"seen": "main"}}
    )
    obj = api.get_namespaced_custom_object(
        "smoke.memorycore.io", "v1", "smoke", "widgets", "statusful"
    )
    assert "status" not in obj or obj["status"].get("seen") != "main"
    api.patch_namespaced_custom_object_status(
        "smoke.memorycore.io", "v1", "smoke", "widgets", "statusful", {"status": {"seen": "sub"}}
    )
    obj = api.get_namespaced_custom_object(
        "smoke.memorycore.io", "v1", "smoke", "widgets", "statusful"
    )
    assert obj["status"]["seen"] == "sub"


def test_stale_resource_version_is_a_conflict(widgets: ControlPlane) -> None:
    widgets.kubectl_run("apply", "-f", "-", input=widget("racy", 1))
    api = client.CustomObjectsApi(api_client(widgets))
    obj = api.get_namespaced_custom_object("smoke.memorycore.io", "v1", "smoke", "widgets", "racy")
    stale = obj["metadata"]["resourceVersion"]
    api.patch_namespaced_custom_object(
        "smoke.memorycore.io", "v1", "smoke", "widgets", "racy", {"spec": {"size": 2}}
    )
    obj["spec"]["size"] = 3
    obj["metadata"]["resourceVersion"] = stale
    with pytest.raises(client.ApiException) as err:
        api.replace_namespaced_custom_object(
            "smoke.memorycore.io", "v1", "smoke", "widgets", "racy", obj
        )
    assert err.value.status == 409


def test_a_watch_sees_a_change(widgets: ControlPlane) -> None:
    api = client.CustomObjectsApi(api_client(widgets))
    seen: list[tuple[str, int]] = []
    ready = threading.Event()

    def watch_widgets() -> None:
        w = watch.Watch()
        ready.set()
        for event in w.stream(
            api.list_namespaced_custom_object,
            "smoke.memorycore.io",
            "v1",
            "smoke",
            "widgets",
            timeout_seconds=20,
        ):
            obj = event["object"]
            if obj["metadata"]["name"] == "watched":
                seen.append((event["type"], obj["spec"]["size"]))
                if event["type"] == "MODIFIED":
                    w.stop()

    t = threading.Thread(target=watch_widgets, daemon=True)
    t.start()
    ready.wait()
    widgets.kubectl_run("apply", "-f", "-", input=widget("watched", 1))
    widgets.kubectl_run(
        "-n", "smoke", "patch", "widget", "watched", "--type=merge", "-p", '{"spec":{"size":5}}'
    )
    t.join(25)
    assert ("MODIFIED", 5) in seen


def test_a_kopf_operator_reacts_to_a_create_and_patches_status(
    widgets: ControlPlane, tmp_path: Path
) -> None:
    operator = tmp_path / "widget_operator.py"
    operator.write_text(
        textwrap.dedent(
            """
        import kopf

        @kopf.on.create("smoke.memorycore.io", "v1", "widgets")
        def created(spec, patch, **_):
            patch.status["seen"] = f"size-{spec['size']}"
        """
        )
    )
    log = tmp_path / "kopf.log"
    proc = spawn(
        [
            sys.executable,
            "-m",
            "kopf",
            "run",
            "--standalone",
            "--namespace",
            "smoke",
            str(operator),
        ],
        log,
        env=widgets.env(),
    )
    try:
        widgets.kubectl_run("apply", "-f", "-", input=widget("operated", 4))

        def status_seen() -> bool:
            out = widgets.kubectl_run(
                "-n", "smoke", "get", "widget", "operated", "-o", "jsonpath={.status.seen}"
            ).stdout
            return out == "size-4"

        wait_for(status_seen, 60, 0.5, message="kopf to patch status", log=log)
    finally:
        assert stop(proc) is not None
    assert proc.poll() is not None


def test_service_account_without_rbac_is_forbidden(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    cp = control_plane
    cp.kubectl_run("create", "namespace", "rbac-smoke", check=False)
    cp.kubectl_run("-n", "rbac-smoke", "create", "serviceaccount", "nobody")
    kubeconfig = cp.service_account_kubeconfig(
        "rbac-smoke", "nobody", tmp_path / "nobody.kubeconfig"
    )
    denied = cp.kubectl_run("get", "configmaps", kubeconfig=kubeconfig, check=False)
    assert denied.returncode != 0
    assert "Forbidden" in denied.stderr
    assert "system:serviceaccount:rbac-smoke:nobody" in denied.stderr
    who = cp.kubectl_run(
        "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}", kubeconfig=kubeconfig
    )
    assert who.stdout == "system:serviceaccount:rbac-smoke:nobody"


def test_pod_security_admission_enforces_restricted(control_plane: ControlPlane) -> None:
    cp = control_plane
    cp.kubectl_run("create", "namespace", "psa-smoke", check=False)
    cp.kubectl_run(
        "label",
        "--overwrite",
        "namespace",
        "psa-smoke",
        "pod-security.kubernetes.io/enforce=restricted",
    )
    # No controller-manager runs here, so the namespace's default ServiceAccount is made by hand.
    cp.kubectl_run("-n", "psa-smoke", "create", "serviceaccount", "default", check=False)
    privileged = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "priv", "namespace": "psa-smoke"},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox", "securityContext": {"privileged": True}}
            ]
        },
    }
    res = cp.kubectl_run(
        "apply", "--dry-run=server", "-f", "-", input=json.dumps(privileged), check=False
    )
    assert res.returncode != 0
    assert 'violates PodSecurity "restricted' in res.stderr


def test_helm_installs_and_uninstalls_a_chart(control_plane: ControlPlane, tmp_path: Path) -> None:
    chart = tmp_path / "tiny"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: tiny\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\n"
        "metadata:\n  name: tiny-{{ .Release.Name }}\ndata:\n  a: b\n"
    )
    env = control_plane.env()
    helm = str(control_plane.helm)
    subprocess.run(
        [helm, "install", "t1", str(chart), "-n", "default", "--wait"],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert control_plane.kubectl_run("get", "configmap", "tiny-t1").returncode == 0
    subprocess.run(
        [helm, "uninstall", "t1", "-n", "default", "--wait"],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    gone = control_plane.kubectl_run("get", "configmap", "tiny-t1", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
