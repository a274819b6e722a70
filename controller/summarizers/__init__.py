"""The summarizers, behind one contract (controller.summarizers.contract): given a session's
bounded chunk of new memories and the summary so far, propose one PassUpdate. The pipeline
chunks, the merge merges. extractive: the embedded default, no model; chat_model: any
OpenAI-compatible chat-completions endpoint."""
