import re

import pytest

from controller.core.naming import summary_object_name, summary_row_id

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

AWKWARD_IDS = [
    "3f2b8c1e-9d4a-4e6f-8a2b-1c3d5e7f9a0b",
    "3F2B8C1E-9D4A-4E6F-8A2B-1C3D5E7F9A0B",
    "worktree/feature/login#42",
    "セッション-東京-1",
    "ünïcödé session ✨",
    "x" * 300,
    "---",
    "a",
    "..//..",
]


@pytest.mark.parametrize("session_id", AWKWARD_IDS)
def test_any_session_id_maps_to_a_valid_object_name(session_id: str) -> None:
    name = summary_object_name(session_id)
    assert DNS1123_LABEL.match(name), name
    assert len(name) <= 63


def test_the_same_session_always_gets_the_same_name() -> None:
    assert summary_object_name("Session/ABC") == summary_object_name("Session/ABC")


def test_ids_that_differ_only_in_case_or_punctuation_get_distinct_names() -> None:
    names = {summary_object_name(s) for s in [*AWKWARD_IDS[:2], "a/b", "a-b", "a_b", "A/B"]}
    assert len(names) == 6


def test_uuid_names_stay_readable() -> None:
    assert summary_object_name(AWKWARD_IDS[0]).startswith("3f2b8c1e-9d4a")


def test_empty_session_id_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        summary_object_name("")


def test_summary_row_id_matches_the_existing_readers() -> None:
    assert summary_row_id("abc") == "summary_abc"
