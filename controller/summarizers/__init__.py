"""The summarizers, behind one contract (contract.py). extractive: the embedded default, no
model; chat_model: any OpenAI-compatible chat-completions endpoint."""
