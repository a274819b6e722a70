"""The pure domain core: no Kubernetes, no Chroma, no network, no clock unless passed in.

memories (the rows agents write), summary (the structured summary, its row and its
rules), merge + quoting (how a summary grows without losing a fact), chunking (what one pass
reads), sweep_plan (which sessions need a summary), claim_rules (who may write a session),
retention, naming, summarizer_status (a SessionSummarizer's conditions)."""
