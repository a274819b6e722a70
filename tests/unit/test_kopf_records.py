"""Where kopf keeps what it handled (controller/operator.py): the diff base in the status, so
a pass sends one patch (its status), not a second one of the object's annotations; no
`kopf-managed` marker patched onto each new object, yet never a patch that empties the
annotations (kopf warns of inconsistencies). Real kopf storages, real bodies."""

from __future__ import annotations

import copy
from typing import Any

import kopf
from hypothesis import given
from hypothesis import strategies as st

from controller.operator import UnmarkedProgress, status_diffbase

PREFIX = "memorycore.io"
FIELD = "lastHandledConfiguration"

words = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
label_keys = st.from_regex(r"[a-z]([a-z0-9.-]{0,10}[a-z0-9])?", fullmatch=True)
specs = st.fixed_dictionaries(
    {"sessionId": words, "trigger": st.sampled_from(["sunset", "sweep", "manual"])},
    optional={"requestedAt": words, "summarizerRef": words, "action": words},
)


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A SessionSummary as the apiserver returns it: users' labels and annotations, kopf's
    progress annotations under our prefix, and whatever status a pass left."""
    annotations = draw(st.dictionaries(label_keys.map(lambda k: f"example.com/{k}"), words))
    if draw(st.booleans()):
        annotations[f"{PREFIX}/summarize"] = '{"retries":1}'
    status = draw(st.sampled_from([{}, {"phase": "Summarized", "observedGeneration": 3}]))
    return {
        "apiVersion": "memorycore.io/v1alpha1",
        "kind": "SessionSummary",
        "metadata": {
            "name": "s",
            "namespace": "ns",
            "uid": "u",
            "generation": 3,
            "resourceVersion": "42",
            "labels": draw(st.dictionaries(label_keys, words, max_size=3)),
            "annotations": annotations,
        },
        "spec": draw(specs),
        "status": status,
    }


def applied(raw: dict[str, Any], patch: kopf.Patch) -> dict[str, Any]:
    """The body after the apiserver merged the patch's status (the one part a pass sends)."""
    out = copy.deepcopy(raw)
    out["status"] = {**out.get("status", {}), **dict(patch.get("status", {}))}
    return out


def essence(storage: Any, raw: dict[str, Any]) -> Any:
    """What kopf compares: its diff base's build, with our progress annotations cleared."""
    progress = UnmarkedProgress(prefix=PREFIX)
    return progress.clear(essence=storage.build(body=kopf.Body(raw)))


@given(bodies())
def test_a_handled_change_is_stored_in_the_status_alone_and_read_back(raw: dict[str, Any]) -> None:
    storage = status_diffbase()
    patch = kopf.Patch()
    storage.store(body=kopf.Body(raw), patch=patch, essence=essence(storage, raw))
    assert set(patch) == {"status"} and set(patch["status"]) == {FIELD}  # no annotation
    after = applied(raw, patch)
    # The next event of the same object: nothing changed, so kopf starts no handler.
    assert storage.fetch(body=kopf.Body(after)) == essence(storage, after)
    # The status field never counts as a change of the object (nor would it loop).
    assert essence(storage, after) == essence(storage, raw)


def test_a_retried_handler_s_progress_adds_no_kopf_managed_marker() -> None:
    raw = {"metadata": {"name": "s", "namespace": "ns", "annotations": {}}, "spec": {}}
    progress = UnmarkedProgress(prefix=PREFIX)
    patch = kopf.Patch()
    record: Any = {"started": "2026-11-27T00:00:00Z", "retries": 1, "success": False}
    progress.store(key=kopf.HandlerId("summarize"), record=record, body=kopf.Body(raw), patch=patch)
    assert list(patch["metadata"]["annotations"]) == [f"{PREFIX}/summarize"]
    # kopf's own storage would have added it: the override still reaches kopf's hook.
    stock = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    stock_patch = kopf.Patch()
    stock.store(
        key=kopf.HandlerId("summarize"), record=record, body=kopf.Body(raw), patch=stock_patch
    )
    assert f"{PREFIX}/kopf-managed" in stock_patch["metadata"]["annotations"]


def merged(target: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386) as the apiserver applies it, dropping an emptied
    `metadata.annotations` map as it does."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(out.get(key), value)
    if out.get("metadata", {}).get("annotations") == {}:
        del out["metadata"]["annotations"]
    return out


progress_keys = st.sets(st.sampled_from(["summarize", "summarize.spec", "touch-dummy"]))


@given(
    st.dictionaries(label_keys.map(lambda k: f"example.com/{k}"), words, max_size=2), progress_keys
)
def test_kopf_s_last_patch_of_a_handled_object_comes_back_as_sent(
    users: dict[str, str], progress: set[str]
) -> None:
    """kopf's patch after its handlers finished (its progress purged, its touch removed) is
    checked by kopf against what the apiserver returns: an emptied annotations map, which the
    apiserver drops, read as "Merge-patching finished with inconsistencies"."""
    from kopf._cogs.structs import diffs
    from kopf._core.actions.application import KNOWN_INCONSISTENCIES

    annotations = {**users, **{f"{PREFIX}/{k}": '{"retries":1}' for k in progress}}
    raw = {"metadata": {"name": "s", "namespace": "ns", "annotations": annotations}}
    storage, body, patch = UnmarkedProgress(prefix=PREFIX), kopf.Body(raw), kopf.Patch()
    for key in ("summarize", "summarize.spec"):
        storage.purge(key=kopf.HandlerId(key), body=body, patch=patch)
    storage.touch(body=body, patch=patch, value=None)  # as kopf's apply() does
    result = merged(raw, copy.deepcopy(dict(patch)))
    inconsistencies = [
        (op, field, old, new)
        for op, field, old, new in diffs.diff(dict(patch), result, scope=diffs.DiffScope.LEFT)
        if old or new or field not in KNOWN_INCONSISTENCIES
    ]
    assert inconsistencies == []
    assert not [
        k for k in result["metadata"].get("annotations", {}) if k in annotations and k not in users
    ]


def test_a_first_pass_that_succeeds_patches_no_annotation() -> None:
    raw = {"metadata": {"name": "s", "namespace": "ns"}, "spec": {}}
    progress, body, patch = UnmarkedProgress(prefix=PREFIX), kopf.Body(raw), kopf.Patch()
    record: Any = {"started": "2026-11-27T00:00:00Z", "success": True}
    progress.store(key=kopf.HandlerId("summarize"), record=record, body=body, patch=patch)
    progress.purge(key=kopf.HandlerId("summarize"), body=body, patch=patch)
    progress.touch(body=body, patch=patch, value=None)
    assert not patch.get("metadata", {}).get("annotations")


@given(st.integers(1, 4), st.integers(1, 4), st.sampled_from(["summarize", "summarize/spec"]))
def test_a_handler_s_retry_delay_holds_only_for_the_spec_generation_that_failed(
    failed: int, now: int, handler: str
) -> None:
    """kopf keeps an unfinished handler's delay across spec changes: read back for the
    generation it was written for (as written, so kopf sees nothing to store again), and not
    at all for another one, so the handler runs at once."""
    raw = {"metadata": {"name": "s", "namespace": "ns", "generation": failed}, "spec": {}}
    storage, patch, key = UnmarkedProgress(prefix=PREFIX), kopf.Patch(), kopf.HandlerId(handler)
    record: Any = {"started": "2026-11-27T00:00:00Z", "delayed": "2026-11-27T00:05:00Z"}
    record["retries"] = 6
    storage.store(key=key, record=record, body=kopf.Body(raw), patch=patch)
    after = merged(raw, copy.deepcopy(dict(patch)))
    after["metadata"]["generation"] = now
    assert storage.fetch(key=key, body=kopf.Body(after)) == (record if now == failed else None)
