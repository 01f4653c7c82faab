"""Framework integrations, one module each (``langchain``, ``autogen``, ``crewai``,
``openai_agents``, and ``otel`` for apps that already emit OpenTelemetry agent spans).

Each imports its framework lazily, on import of the module itself, so ``pbkv_sdk`` alone needs
httpx only.
"""
