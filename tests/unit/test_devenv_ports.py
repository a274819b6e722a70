"""The ports our test servers listen on come from below the kernel's ephemeral range, so an
outgoing connection cannot take one between `free_port()` and the server's bind (a CI run
lost its API server to `bind: address already in use` so)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from devenv.controlplane import free_port


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_free_ports_are_below_the_ephemeral_range_and_bindable() -> None:
    low = _ephemeral_low()
    ports = {free_port() for _ in range(200)}
    assert len(ports) > 150  # drawn, not one port over and over
    assert all(1024 <= p < low for p in ports), sorted(p for p in ports if p >= low)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))


def test_a_port_in_use_is_never_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        busy = taken.getsockname()[1]
        draws = iter([busy, busy, busy + 1 if busy + 1 < _ephemeral_low() else busy - 1])
        monkeypatch.setattr("devenv.controlplane.random.randrange", lambda a, b: next(draws))
        assert free_port() != busy


def test_each_test_worker_draws_from_its_own_share(monkeypatch: pytest.MonkeyPatch) -> None:
    low = _ephemeral_low()
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    shares = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        shares.append({free_port() for _ in range(100)})
    middle = 10000 + (low - 10000) // 2
    assert all(p < middle for p in shares[0]) and all(middle <= p < low for p in shares[1])
