"""The manifests in the docs are copied by new users: each must be accepted by the CRD's
schema and read by the models in controller/api.py field for field (the models ignore
unknown keys, so a misspelt field would otherwise pass silently and do nothing)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from controller.api import SessionSummarizerSpec, SessionSummarySpec

REPO = Path(__file__).resolve().parents[2]
CRDS = {
    "SessionSummarizer": REPO / "crds" / "sessionsummarizers.memorycore.io.yaml",
    "SessionSummary": REPO / "crds" / "sessionsummaries.memorycore.io.yaml",
}
MODELS: dict[str, type[BaseModel]] = {
    "SessionSummarizer": SessionSummarizerSpec,
    "SessionSummary": SessionSummarySpec,
}
_YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)
_HEREDOC = re.compile(r"<<'YAML'\n(.*?)^YAML$", re.S | re.M)


def examples() -> list[tuple[str, dict[str, Any]]]:
    """(where, object) for every manifest in docs/configuration.md,
    docs/migrating-from-neo.md and the README."""
    found: list[tuple[str, dict[str, Any]]] = []
    for path, pattern in (
        (REPO / "docs" / "configuration.md", _YAML_BLOCK),
        (REPO / "docs" / "migrating-from-neo.md", _YAML_BLOCK),
        (REPO / "README.md", _HEREDOC),
    ):
        text = path.read_text()
        for match in pattern.finditer(text):
            line = text[: match.start()].count("\n") + 1
            for doc in yaml.safe_load_all(match.group(1)):
                if doc is not None:
                    found.append((f"{path.name}:{line} {doc.get('kind')}", doc))
    return found


EXAMPLES = examples()


def schema_errors(value: Any, schema: dict[str, Any], where: str = "") -> list[str]:
    """The subset of OpenAPI v3 our CRDs use (CEL rules are the apiserver's: the
    integration test applies the examples with a server-side dry run)."""
    errors: list[str] = []
    kind = schema.get("type")
    types = {
        "object": dict,
        "array": list,
        "string": str,
        "boolean": bool,
        "integer": int,
        "number": (int, float),
    }
    if kind in types and (
        not isinstance(value, types[kind]) or (kind != "boolean" and isinstance(value, bool))
    ):
        return [f"{where or '.'}: expected {kind}, got {value!r}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not one of {schema['enum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 1e9):
            errors.append(f"{where}: length {len(value)} out of bounds")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and not schema.get("minimum", -1e30) <= value <= schema.get("maximum", 1e30):
        errors.append(f"{where}: {value} out of bounds")
    if isinstance(value, dict) and "properties" in schema:
        props = schema["properties"]
        errors += [f"{where}.{k}: not a field" for k in value if k not in props]
        errors += [f"{where}.{k}: required" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k in props:
                errors += schema_errors(v, props[k], f"{where}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            errors += schema_errors(v, schema["items"], f"{where}[{i}]")
    return errors


def unknown_fields(data: Any, model: type[BaseModel], where: str = "spec") -> list[str]:
    """Keys the model would ignore: a typo the apiserver might keep and we would not read."""
    if not isinstance(data, dict):
        return []
    by_alias = {(f.alias or name): f for name, f in model.model_fields.items()}
    errors = []
    for key, value in data.items():
        field = by_alias.get(key)
        if field is None:
            errors.append(f"{where}.{key}")
            continue
        sub = field.annotation
        for candidate in getattr(sub, "__args__", (sub,)):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                errors += unknown_fields(value, candidate, f"{where}.{key}")
    return errors


def crd_schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load(CRDS[kind].read_text())
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def test_the_docs_have_the_examples_a_new_user_needs() -> None:
    summarizers = [o for _, o in EXAMPLES if o.get("kind") == "SessionSummarizer"]
    specs = [SessionSummarizerSpec.model_validate(o.get("spec") or {}) for o in summarizers]
    assert any(s.store.auth_secret_ref is None and s.model.backend == "extractive" for s in specs)
    assert any(s.store.auth_secret_ref is not None for s in specs)
    assert any(s.model.backend == "openai" and s.model.api_key_secret_ref for s in specs)
    assert any(s.embedding.provider == "openai" for s in specs)
    assert any(o.get("kind") == "SessionSummary" for _, o in EXAMPLES)


@pytest.mark.parametrize(("where", "obj"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_every_example_manifest_is_valid_against_the_crd_and_the_models(
    where: str, obj: dict[str, Any]
) -> None:
    kind = obj.get("kind")
    assert obj.get("apiVersion") == ("v1" if kind == "Secret" else "memorycore.io/v1alpha1")
    assert obj.get("metadata", {}).get("name") and obj["metadata"].get("namespace"), where
    if kind == "Secret":
        assert isinstance(obj.get("stringData"), dict), where
        return
    assert kind in CRDS, f"{where}: unexpected kind"
    assert schema_errors(obj, crd_schema(kind)) == [], where
    MODELS[kind].model_validate(obj.get("spec") or {})
    assert unknown_fields(obj.get("spec") or {}, MODELS[kind]) == [], where


def test_every_secret_an_example_names_is_in_the_example_with_its_key() -> None:
    secrets = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o.get("stringData") or {}
        for _, o in EXAMPLES
        if o.get("kind") == "Secret"
    }
    for where, obj in EXAMPLES:
        if obj.get("kind") != "SessionSummarizer":
            continue
        spec = SessionSummarizerSpec.model_validate(obj.get("spec") or {})
        refs = [
            spec.store.auth_secret_ref,
            spec.model.api_key_secret_ref,
            spec.embedding.api_key_secret_ref,
        ]
        for ref in filter(None, refs):
            data = secrets.get((obj["metadata"]["namespace"], ref.name))
            assert data is not None and ref.key in data, f"{where}: Secret {ref.name}/{ref.key}"
