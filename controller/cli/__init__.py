"""summaryctl: what agents and people call.

summaryctl sunset SESSION_ID        create/patch the session's SessionSummary (sunset step)
summaryctl rebuild SESSION_ID       regenerate its summary from its living memories (old text gone)
summaryctl forget SESSION_ID        delete its summary and the operator's state (--memories --yes:
                                    its memories too); audited in an Event
summaryctl check [--summarizer N]   is a SessionSummarizer Ready? (each condition, exit 1 if not)
summaryctl summaries --limit N      the newest summaries, as the next agent reads them at boot
summaryctl verify SESSION_ID...     which memories no summary covers (exit 1 when any)
summaryctl summarize ID... --bypass-claim
                                    recovery path: summarize straight into Chroma, no operator
                                    and no claim (--summarizer NAME / --summarizer-file FILE:
                                    its settings)
"""
