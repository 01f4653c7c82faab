"""Framework integrations, one module each (``langchain``, ``autogen``, ``crewai``,
``openai_agents``, and ``otel`` for apps that already emit OpenTelemetry agent spans).

Each is one :class:`~pbkv_sdk.integrations.base.Instrumentor` with idempotent ``instrument()`` /
``uninstrument()`` (:mod:`pbkv_sdk.integrations.base`). The modules themselves import no
framework; their framework-facing classes live in a sibling module (``langchain_handler``,
``autogen_team``, ``crewai_hooks``, ``openai_agents_processor``, ``otel_processor``), imported
once the dependency check has passed, so ``pbkv_sdk`` alone needs httpx only. The two
tracing-based integrations (``otel``, ``openai_agents``) share the live-span bookkeeping of
``spantree``.
"""
