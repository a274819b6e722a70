"""Every field a user sets is bounded, and an endpoint URL never carries credentials: the
same rules in the pydantic models, both CRD copies and the chart's values schema."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controller.api import (
    SECRET_KEY_PATTERN,
    SECRET_NAME_PATTERN,
    EmbeddingConfig,
    ModelSpec,
    SessionSummarizerSpec,
    StoreSpec,
)
from controller.core.endpoint_url import ENDPOINT_URL_PATTERN, endpoint_url_problem

ROOT = Path(__file__).resolve().parents[2]
CRDS = [ROOT / "crds", ROOT / "charts" / "session-summary-operator" / "crds"]
VALUES_SCHEMA = ROOT / "charts" / "session-summary-operator" / "values.schema.json"


def spec_schema(where: Path, crd: str) -> dict[str, Any]:
    doc = yaml.safe_load((where / crd).read_text())
    return dict(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"])


def unbounded(schema: dict[str, Any], path: str) -> list[str]:
    found = []
    kind = schema.get("type")
    if kind == "string" and "enum" not in schema and "maxLength" not in schema:
        found.append(f"{path}: a string without maxLength")
    if kind == "array" and "maxItems" not in schema:
        found.append(f"{path}: an array without maxItems")
    if kind in ("integer", "number") and "maximum" not in schema:
        found.append(f"{path}: a number without maximum")
    for name, sub in (schema.get("properties") or {}).items():
        found += unbounded(sub, f"{path}.{name}")
    if "items" in schema:
        found += unbounded(schema["items"], f"{path}[]")
    return found


@pytest.mark.parametrize("where", CRDS, ids=["crds", "chart"])
@pytest.mark.parametrize(
    "crd", ["sessionsummarizers.memorycore.io.yaml", "sessionsummaries.memorycore.io.yaml"]
)
def test_every_field_of_a_spec_is_bounded(where: Path, crd: str) -> None:
    assert unbounded(spec_schema(where, crd), "spec") == []


@pytest.mark.parametrize("where", CRDS, ids=["crds", "chart"])
def test_the_crds_carry_the_endpoint_and_secret_rules_of_the_models(where: Path) -> None:
    spec = spec_schema(where, "sessionsummarizers.memorycore.io.yaml")["properties"]
    for part in ("model", "embedding"):
        fields = spec[part]["properties"]
        assert fields["baseUrl"]["pattern"] == ENDPOINT_URL_PATTERN
        ref = fields["apiKeySecretRef"]["properties"]
        assert (ref["name"]["pattern"], ref["key"]["pattern"]) == (
            SECRET_NAME_PATTERN,
            SECRET_KEY_PATTERN,
        )
    ref = spec["store"]["properties"]["authSecretRef"]["properties"]
    assert (ref["name"]["pattern"], ref["key"]["pattern"]) == (
        SECRET_NAME_PATTERN,
        SECRET_KEY_PATTERN,
    )


def test_the_chart_values_schema_refuses_the_same_endpoint_urls() -> None:
    schema = json.loads(VALUES_SCHEMA.read_text())["properties"]["summarizer"]["properties"]
    for part in ("model", "embedding"):
        pattern = schema[part]["properties"]["baseUrl"]["pattern"]
        assert pattern == "^(" + ENDPOINT_URL_PATTERN[1:-1] + ")?$"


ACCEPTED = [
    "https://api.openai.com/v1",
    "http://localhost:11434/v1",
    "http://[::1]:8080/v1",
    "https://generativelanguage.googleapis.com/v1beta/openai/",
    "http://vllm.models.svc:8000/v1?x=1",
    "https://host/v1/@handle",
]
REFUSED = [
    "https://user:s3cr3t@api.openai.com/v1",
    "https://s3cr3t@api.openai.com/v1",
    "https://:s3cr3t@api.openai.com",
    "ftp://api.openai.com/v1",
    "api.openai.com/v1",
    "https:///v1",
    "https://api.openai.com /v1",
    "https://api.openai.com/v1\r\nX-Injected: 1",
    "https://api.openai.com:99999/v1",
    "https://" + "a" * 2048,
]


@pytest.mark.parametrize("url", ACCEPTED)
def test_an_endpoint_url_is_accepted(url: str) -> None:
    assert endpoint_url_problem(url) is None
    assert ModelSpec.model_validate({"baseUrl": url}).base_url == url
    assert EmbeddingConfig.model_validate({"baseUrl": url}).base_url == url


@pytest.mark.parametrize("url", REFUSED)
def test_a_url_with_credentials_or_no_host_is_refused_without_being_repeated(url: str) -> None:
    assert endpoint_url_problem(url) is not None
    for model in (ModelSpec, EmbeddingConfig):
        with pytest.raises(ValidationError) as err:
            model.model_validate({"baseUrl": url})
        assert "s3cr3t" not in str(err.value)


def test_a_store_url_with_credentials_is_refused_without_being_repeated() -> None:
    with pytest.raises(ValidationError) as err:
        StoreSpec.model_validate({"url": "http://admin:hunter2@chroma:8000"})
    assert "hunter2" not in str(err.value)


@settings(max_examples=400, deadline=None)
@given(
    url=st.tuples(
        st.sampled_from(["http://", "https://", "HTTP://", "http:/"]),
        st.text(alphabet=st.sampled_from("ab1.-_:[]/@?# %\t"), max_size=16),
    ).map("".join)
)
def test_an_accepted_endpoint_url_has_a_host_and_no_credentials(url: str) -> None:
    python_match = re.fullmatch(ENDPOINT_URL_PATTERN, url) is not None
    if endpoint_url_problem(url) is not None:
        return
    assert python_match
    parts = urlsplit(url)
    assert parts.scheme.lower() in ("http", "https") and parts.hostname
    assert parts.username is None and parts.password is None


def test_over_long_fields_are_refused_by_the_models() -> None:
    too_long = {
        "model": {"backend": "openai", "baseUrl": "https://h/v1", "model": "m" * 257},
        "embedding": {"model": "e" * 257},
        "store": {"tenant": "t" * 257},
        "excludedMemoryTypes": ["x"] * 65,
    }
    for key, value in too_long.items():
        with pytest.raises(ValidationError):
            SessionSummarizerSpec.model_validate({key: value})
    with pytest.raises(ValidationError):
        ModelSpec.model_validate({"maxInputTokens": 2_000_001})
    with pytest.raises(ValidationError):
        StoreSpec.model_validate({"authSecretRef": {"name": "Not_A_Secret_Name"}})
