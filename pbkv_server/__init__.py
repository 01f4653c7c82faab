"""PBKV serving side: engine core (radix cache, policies, scoring, prefetch, cost model),
discrete-event simulator, OpenAI-compatible HTTP server and SGLang plugin."""
