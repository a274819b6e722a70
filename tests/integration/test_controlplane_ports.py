"""The control plane starts even when a port it drew is taken before its server binds it:
it draws new ports and starts again (a CI run once lost a whole worker's tests to one
`bind: address already in use`)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from devenv import controlplane
from devenv.controlplane import ControlPlane, free_port, tools_bin_dir


def test_a_port_taken_before_the_api_server_binds_it_is_drawn_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        busy = taken.getsockname()[1]
        # etcd's two ports are free; the API server's was free when drawn and is taken now.
        draws = iter([free_port(), free_port(), busy])
        monkeypatch.setattr(controlplane, "free_port", lambda: next(draws, None) or free_port())
        cp = ControlPlane(workdir=tmp_path / "cp", bin_dir=tools_bin_dir())
        try:
            cp.start()
            assert cp.api_port != busy
            assert cp.kubectl_run("get", "namespaces", "default", "-o", "name").stdout.strip() == (
                "namespace/default"
            )
        finally:
            cp.stop()
