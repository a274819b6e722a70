"""summaryctl: what agents and people call.

summaryctl sunset SESSION_ID        create/patch the session's SessionSummary (sunset step)
summaryctl rebuild SESSION_ID       regenerate its summary from its living memories (old text gone)
summaryctl forget SESSION_ID        delete its summary and the operator's state (--memories --yes:
                                    its memories too); audited in an Event
summaryctl check [--summarizer N]   is a SessionSummarizer Ready, measured now? (exit 1 if not)
summaryctl remember SESSION_ID      write a memory as an agent does (--prompt/--response, or
                                    --sunset-marker); an empty Chroma gets the collection
summaryctl summaries --limit N      the newest summaries, as the next agent reads them at boot
summaryctl ledger SESSION_ID        the operator's state beside a session's summary row
summaryctl verify SESSION_ID...     which memories no summary covers (exit 1 when any, or none)
summaryctl handover                 hand the store to this cluster (other clusters' records go)
summaryctl summarize ID... --bypass-claim
                                    recovery path: summarize straight into Chroma, no operator
                                    and no claim (--summarizer NAME / --summarizer-file FILE:
                                    its settings)
"""
