"""``python -m examples.hover_langchain``: the main job on HoVer claims with the LangGraph app."""

from examples.common.cli import main, make_app
from examples.hover_langchain.run import spec

app = make_app(spec, "HoVer fact-checking (LangGraph) end to end on the embedded PBKV engine.")

if __name__ == "__main__":
    main(app, "python -m examples.hover_langchain")
