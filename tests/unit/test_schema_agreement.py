"""One schema, stated twice: the pydantic models in controller/api.py and the CRDs the
apiserver enforces must agree field by field (names, types, required, defaults, enums and
bounds), in spec and status, so an object the apiserver accepted is one the operator can
read and a default means the same on both sides. Patterns and CEL rules are compared where
they are written (tests/unit/test_store_rules.py)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from controller.api import (
    SessionSummarizerSpec,
    SessionSummarizerStatus,
    SessionSummarySpec,
    SessionSummaryStatus,
)
from controller.cli.args import session_id_arg
from controller.core.claim_rules import Claim, Writer
from controller.core.sweep_plan import collect_activity, marker_problem
from controller.status.conditions import spec_problems

ROOT = Path(__file__).resolve().parents[2]
COMPARED = ("type", "enum", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems")
Schema = dict[str, Any]


def from_pydantic(schema: Schema, defs: dict[str, Schema]) -> Schema:
    """The comparable part of a pydantic JSON schema: refs resolved, Optional unwrapped."""
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    if "anyOf" in schema:
        branches = [b for b in schema["anyOf"] if b.get("type") != "null"]
        assert len(branches) == 1, f"a union the CRD cannot state: {schema}"
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        schema = {**from_pydantic(branches[0], defs), **rest}
    return _comparable(schema, lambda s: from_pydantic(s, defs), skip_default=None)


def from_crd(schema: Schema) -> Schema:
    return _comparable(schema, from_crd, skip_default=None)


def _comparable(schema: Schema, recurse: Any, skip_default: Any) -> Schema:
    out = {k: schema[k] for k in COMPARED if k in schema}
    # An object's default is its fields' defaults (the CRD says {}; pydantic spells it out).
    if schema.get("default", skip_default) is not skip_default and out.get("type") != "object":
        out["default"] = schema["default"]
    if "properties" in schema:
        out["properties"] = {k: recurse(v) for k, v in schema["properties"].items()}
        out["required"] = sorted(schema.get("required", []))
    if "items" in schema:
        out["items"] = recurse(schema["items"])
    return out


def differences(pyd: Schema, crd: Schema, path: str) -> list[str]:
    found = []
    for key in sorted(set(pyd) | set(crd)):
        if key == "properties":
            a, b = pyd.get(key, {}), crd.get(key, {})
            for name in sorted(set(a) | set(b)):
                if name not in a:
                    found.append(f"{path}.{name}: in the CRD only")
                elif name not in b:
                    found.append(f"{path}.{name}: in the pydantic model only")
                else:
                    found += differences(a[name], b[name], f"{path}.{name}")
        elif key == "items":
            found += differences(pyd.get(key, {}), crd.get(key, {}), f"{path}[]")
        elif pyd.get(key) != crd.get(key):
            found.append(f"{path} {key}: pydantic {pyd.get(key)!r}, CRD {crd.get(key)!r}")
    return found


def crd_schema(path: Path) -> Schema:
    doc = yaml.safe_load(path.read_text())
    return dict(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


CASES = [
    ("sessionsummarizers.memorycore.io.yaml", "spec", SessionSummarizerSpec),
    ("sessionsummarizers.memorycore.io.yaml", "status", SessionSummarizerStatus),
    ("sessionsummaries.memorycore.io.yaml", "spec", SessionSummarySpec),
    ("sessionsummaries.memorycore.io.yaml", "status", SessionSummaryStatus),
]


@pytest.mark.parametrize(("crd", "part", "model"), CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
@pytest.mark.parametrize("where", ["crds", "charts/session-summary-operator/crds"])
def test_the_pydantic_model_and_the_crd_agree_field_by_field(
    crd: str, part: str, model: type[BaseModel], where: str
) -> None:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    pyd = from_pydantic(schema, schema.get("$defs", {}))
    declared = from_crd(crd_schema(ROOT / where / crd)["properties"][part])
    if part == "status":  # kopf's record of what it handled: kopf alone reads and writes it
        declared["properties"].pop("lastHandledConfiguration")
    assert differences(pyd, declared, part) == []


def test_the_comparison_sees_a_drift() -> None:
    """The checker itself: a default, a bound, an enum value or a field out of step."""
    crd = {
        "type": "object",
        "required": ["a"],
        "properties": {
            "a": {"type": "integer", "default": 3, "minimum": 1},
            "b": {"type": "string", "enum": ["x", "y"]},
            "c": {"type": "string"},
        },
    }
    pyd = {
        "type": "object",
        "required": [],
        "properties": {
            "a": {"type": "integer", "default": 4},
            "b": {"type": "string", "enum": ["x"]},
            "d": {"type": "string"},
        },
    }
    found = differences(from_crd(pyd), from_crd(crd), "spec")
    assert any("spec.a default" in f for f in found)
    assert any("spec.a minimum" in f for f in found)
    assert any("spec.b enum" in f for f in found)
    assert any("spec.c: in the CRD only" in f for f in found)
    assert any("spec.d: in the pydantic model only" in f for f in found)
    assert any("spec required" in f for f in found)


def test_the_claim_object_written_is_what_the_sessionclaim_crd_declares() -> None:
    schema = crd_schema(ROOT / "crds/sessionclaims.memorycore.io.yaml")["properties"]["spec"]
    written = Claim("s", "c", Writer("r", "u", "ns/n"), 60.0, generation=2, collection="x").spec()
    assert sorted(written) == sorted(schema["properties"])
    assert set(schema["required"]) <= set(written)
    types = {"string": str, "integer": int, "number": (int, float)}
    for key, value in written.items():
        assert isinstance(value, types[schema["properties"][key]["type"]]), key


# CEL's trim() in the CRD's spec.sessionId rule (self.trim().size() > 0) removes exactly the
# Unicode White_Space characters (PropList.txt), as kube-apiserver 1.34 was seen to apply it.
CEL_WHITE_SPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
    + "".join(map(chr, range(0x2000, 0x200B)))
)
session_ids = st.text(
    alphabet=st.one_of(
        st.sampled_from(sorted(CEL_WHITE_SPACE)),
        st.sampled_from("\x1c\x1d\x1e\x1f\u180e\u200b\ufeff\x00a"),
        st.characters(exclude_categories=("Cs",)),  # JSON text never holds a surrogate
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=500, deadline=None)
@given(session_id=session_ids)
def test_a_session_id_is_blank_to_the_operator_exactly_when_the_crd_refuses_it(
    session_id: str,
) -> None:
    """A sessionId the CRD accepts is one the operator reads (its handler never fails to parse
    the object) and summarizes (the sweep, the reconciliation and summaryctl take it)."""
    crd_accepts = not set(session_id) <= CEL_WHITE_SPACE
    try:
        SessionSummarySpec.model_validate({"sessionId": session_id})
        model_accepts = True
    except ValidationError:
        model_accepts = False
    assert model_accepts == crd_accepts
    assert (marker_problem(session_id) is None) == crd_accepts
    assert bool(collect_activity([(session_id, 1)], now_ms=10**12)) == crd_accepts
    try:
        session_id_arg(session_id)
        cli_accepts = True
    except argparse.ArgumentTypeError as exc:
        cli_accepts = "whitespace" not in str(exc)  # refused for another reason (\x00)
    assert cli_accepts == crd_accepts


SUMMARIZER_REF_RULES = [
    crd_schema(ROOT / where / "sessionsummaries.memorycore.io.yaml")["properties"]["spec"][
        "properties"
    ]["summarizerRef"]
    for where in ("crds", "charts/session-summary-operator/crds")
]


@settings(max_examples=300, deadline=None)
@given(ref=st.text(alphabet=st.sampled_from("az09.-_/%?# A"), min_size=1, max_size=6))
def test_a_summarizer_ref_the_crd_accepts_names_one_object_and_the_model_reads_it(
    ref: str,
) -> None:
    """spec.summarizerRef is GET as a path segment: "." got the list of every SessionSummarizer
    (and the pass ran with the defaults of none), "%2e%2e" a 400 (a traceback, no condition),
    "default/" another object than the index's. The CRD refuses what names no object."""
    for rule in SUMMARIZER_REF_RULES:
        crd_accepts = re.fullmatch(rule.get("pattern", "(?s).*"), ref) is not None  # as RE2 does
        try:
            SessionSummarySpec.model_validate({"sessionId": "s", "summarizerRef": ref})
            model_accepts = True
        except ValidationError:
            model_accepts = False
        assert model_accepts == crd_accepts
        if crd_accepts:
            assert ref not in (".", "..") and quote(ref, safe="") == ref


@pytest.mark.parametrize("where", ["crds", "charts/session-summary-operator/crds"])
def test_the_crd_bounds_each_identity_of_identity_trust_tiers_as_the_model_does(where: str) -> None:
    """A structural schema cannot say propertyNames: the CRD states the model's bounds on the
    identities in CEL, so `kubectl apply` refuses "" or a 254-character identity the operator
    would refuse (the summarizer was accepted, then shown InvalidSpec)."""
    schema = SessionSummarizerSpec.model_json_schema(by_alias=True, mode="validation")
    names = schema["$defs"]["VisibilitySpec"]["properties"]["identityTrustTiers"]["propertyNames"]
    spec = crd_schema(ROOT / where / "sessionsummarizers.memorycore.io.yaml")["properties"]["spec"]
    tiers = spec["properties"]["visibility"]["properties"]["identityTrustTiers"]
    rules = [v["rule"] for v in tiers.get("x-kubernetes-validations", [])]
    bounds = f"k.size() >= {names['minLength']} && k.size() <= {names['maxLength']}"
    assert f"self.all(k, {bounds})" in rules


# The CRDs' rules over more than one field (CEL), as the apiserver reads them after
# defaulting (has(self.backend) then holds): part -> (rule, accepts(part's object)).
OBJECT_RULES: dict[str, tuple[str, Any]] = {
    "store": (
        "!has(self.memoryCollection) || !has(self.summaryCollection) || "
        "(self.memoryCollection != self.summaryCollection && "
        "self.memoryCollection != self.summaryCollection + '-ledger')",
        lambda s: (
            s["memoryCollection"]
            not in (s["summaryCollection"], s["summaryCollection"] + "-ledger")
        ),
    ),
    "embedding": (
        "!has(self.provider) || self.provider != 'openai' || has(self.baseUrl)",
        lambda e: e["provider"] != "openai" or "baseUrl" in e,
    ),
    "model": (
        "!has(self.backend) || self.backend != 'openai' || (has(self.baseUrl) && has(self.model))",
        lambda m: m["backend"] != "openai" or ("baseUrl" in m and "model" in m),
    ),
}


def cel_rules(schema: Schema, path: str = "spec") -> list[tuple[str, str]]:
    found = [(path, r["rule"]) for r in schema.get("x-kubernetes-validations", [])]
    for name, sub in (schema.get("properties") or {}).items():
        found += cel_rules(sub, f"{path}.{name}")
    return found + (cel_rules(schema["items"], f"{path}[]") if "items" in schema else [])


@pytest.mark.parametrize("where", ["crds", "charts/session-summary-operator/crds"])
def test_every_rule_over_several_fields_of_the_summarizer_crd_is_modelled_here(where: str) -> None:
    """A new CEL rule across fields fails this until OBJECT_RULES states it (and the property
    test below holds the model to it). Rules of one field are held elsewhere: the patterns
    in test_spec_bounds.py and test_store_rules.py, the identities' bounds above."""
    spec = crd_schema(ROOT / where / "sessionsummarizers.memorycore.io.yaml")["properties"]["spec"]
    across = {(p, r) for p, r in cel_rules(spec) if "has(" in r}
    assert across == {(f"spec.{part}", rule) for part, (rule, _) in OBJECT_RULES.items()}


collection = st.sampled_from([None, "a-b", "x.y", "a-b-ledger"])
parts = st.fixed_dictionaries({
    "store": st.fixed_dictionaries(
        {}, optional={"memoryCollection": collection, "summaryCollection": collection}
    ),
    "embedding": st.fixed_dictionaries({}, optional={
        "provider": st.sampled_from(["local-minilm", "openai"]),
        "baseUrl": st.just("http://embed:11434/v1"),
    }),
    "model": st.fixed_dictionaries({}, optional={
        "backend": st.sampled_from(["extractive", "openai"]),
        "baseUrl": st.just("http://llm:8000/v1"),
        "model": st.just("m"),
    }),
})  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(spec=parts)
def test_a_summarizer_spec_the_crd_refuses_the_model_refuses_naming_the_field(
    spec: dict[str, dict[str, Any]],
) -> None:
    """An object the CRD of the day refuses may exist all the same (stored under an older
    CRD, or before it was installed): the operator must refuse it too, so it is SpecValid
    False naming the field, never a probe or a pass that raises on what is missing."""
    spec = {part: {k: v for k, v in obj.items() if v is not None} for part, obj in spec.items()}
    defaults = SessionSummarizerSpec().to_api()
    refused = [
        part
        for part, (_, accepts) in OBJECT_RULES.items()
        if not accepts({**defaults[part], **spec[part]})  # type: ignore[dict-item]
    ]
    try:
        SessionSummarizerSpec.model_validate(spec)
        problems = ""
    except ValidationError as exc:
        problems = spec_problems(exc)
    assert bool(problems) == bool(refused), (spec, problems)
    for part in refused:
        assert f"spec.{part}" in problems
