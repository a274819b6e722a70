"""Development tooling, not shipped: the local control plane and Chroma launchers, the
demo, the one operator launcher the demo, the integration tests and the benches share,
and the write journal the chaos tests read. The wheel and the image contain only
`controller` (the operator and summaryctl)."""
