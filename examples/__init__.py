"""End-to-end PBKV benchmark examples: real multi-agent apps on real data sets.

Each subpackage (``hover_langchain``, ``swe_autogen``, ``finance_crewai``) holds a dataset loader,
the app in its framework with the PBKV callback, a scenario for the embedded sim engine, and a
runner ``python -m examples.<name>``. ``examples.common`` holds the shared pipeline.
"""
