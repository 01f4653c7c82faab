"""Framework integrations, one module each (``langchain``, ``autogen``, ``crewai``).

Each imports its framework lazily, on import of the module itself, so ``pbkv_sdk`` alone needs
httpx only.
"""
