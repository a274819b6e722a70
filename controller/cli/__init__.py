"""summaryctl: what agents and people call.

summaryctl sunset SESSION_ID        create/patch the session's SessionSummary (sunset step)
summaryctl check [--summarizer N]   is a SessionSummarizer Ready? (each condition, exit 1 if not)
summaryctl summaries --limit N      the newest summaries, as the next agent reads them at boot
summaryctl verify SESSION_ID...     which memories no summary covers (exit 1 when any)
summaryctl summarize ID... --bypass-claim
                                    recovery path: summarize straight into Chroma, no operator
                                    and no claim (--summarizer NAME / --summarizer-file FILE:
                                    its settings)
"""
