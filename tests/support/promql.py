"""Which metrics a PromQL expression (or a Grafana query) reads, and which metrics the
operator exports: for the tests that hold the chart's alerts and dashboard to the operator's
own metrics (tests/integration/test_alerts.py)."""

from __future__ import annotations

import re

KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "inf", "nan", "atan2", "start", "end",
}  # fmt: skip
_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_GROUPINGS = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_RANGES = re.compile(r"\[[^\]]*\]")
_VARIABLES = re.compile(r"\$\{[^}]*\}|\$\w+")
_NAMES = re.compile(r"(?<![\w.])[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (not functions, keywords or label names)."""
    text = _VARIABLES.sub("", _RANGES.sub("", _STRINGS.sub('""', expr)))
    text = _GROUPINGS.sub("", _MATCHERS.sub("", text))
    names = set()
    for found in _NAMES.finditer(text):
        rest = text[found.end() :].lstrip()
        if rest.startswith("(") or found.group().lower() in KEYWORDS:
            continue
        names.add(found.group())
    return names


def grafana_to_promql(expr: str) -> str:
    """A Grafana query with its variables filled in, so promtool can parse it."""
    expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
    return _VARIABLES.sub("x", expr)


def exported_names() -> set[str]:
    """Every series name the operator's Prometheus registry can expose: its collectors'
    families with the suffixes of their types (a labelled family is listed even before its
    first sample), plus the client's process_ and python_ collectors."""
    from prometheus_client import REGISTRY

    import controller.metrics  # noqa: F401  (registers the operator's metrics)

    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("", "_sum", "_count", "_created"),
        "gauge": ("",),
        "info": ("_info",),
    }
    names: set[str] = set()
    for family in REGISTRY.collect():
        names |= {family.name + s for s in suffixes.get(family.type, ("",))}
        names |= {sample.name for sample in family.samples}
    return names
