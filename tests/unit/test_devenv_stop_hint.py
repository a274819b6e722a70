"""`python -m devenv.controlplane up` and `python -m devenv.node up` end by naming the
command that stops what they started: run as printed, it stops that directory's processes
(`make cluster-down` knows only the default directory)."""

from __future__ import annotations

import re
import shlex
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devenv import controlplane, node

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"


def _as_run(command: str) -> list[str]:
    """The module arguments a printed stop command runs (a make target: its recipe's)."""
    argv = shlex.split(command)
    if argv[0] == "make":
        recipe = re.search(rf"^{argv[1]}:.*\n\t(.*)$", MAKEFILE.read_text(), re.M)
        assert recipe, command
        argv = shlex.split(recipe.group(1))
    return argv[argv.index("-m") + 2 :]  # after `-m MODULE`


class FakeControlPlane:
    server = "https://127.0.0.1:1"

    def __init__(self, workdir: Path, bin_dir: Path, **kwargs: object) -> None:
        self.workdir, self.bin_dir = workdir, bin_dir

    def start(self) -> FakeControlPlane:
        self.workdir.mkdir(parents=True)
        return self

    def save_state(self) -> None:
        pass


class FakeNode:
    node_ip = "127.0.0.1"

    def __init__(self, workdir: Path, tools_bin: Path, **kwargs: object) -> None:
        self.kubeconfig, self.tools_bin = workdir / "kubeconfig", tools_bin

    def start(self) -> None:
        pass


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    module=st.sampled_from([controlplane, node]),
    name=st.none() | st.text(st.sampled_from("ab -'$"), min_size=1, max_size=6),
)
def test_up_names_a_stop_command_for_the_directory_it_started_in(
    module: types.ModuleType,
    name: str | None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    default = tmp_path / "default"
    state_dir = default if name is None else tmp_path / "dirs" / name
    monkeypatch.setattr(module, "DEFAULT_STATE_DIR", default)
    monkeypatch.setattr(module, "tools_bin_dir", lambda: tmp_path)
    monkeypatch.setattr(controlplane, "ControlPlane", FakeControlPlane)
    monkeypatch.setattr(node, "LocalNode", FakeNode)
    monkeypatch.setattr(node, "node_bin_dir", lambda: tmp_path)
    flag = "--dir" if module is controlplane else "--state-dir"
    assert module.main(["up", flag, str(state_dir)]) == 0
    stop = re.search(r"stop: (.*)$", capsys.readouterr().out, re.M)
    assert stop, "up names no stop command"

    stopped: list[Path] = []
    monkeypatch.setattr(module, "_cmd_down", lambda where: stopped.append(where) or 0)
    module.main(_as_run(stop.group(1)))
    assert [p.resolve() for p in stopped] == [state_dir.resolve()], stop.group(1)
