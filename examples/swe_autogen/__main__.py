"""``python -m examples.swe_autogen``: the main job on SWE-bench Lite with the AutoGen team."""

from examples.common.cli import main, make_app
from examples.swe_autogen.run import spec

app = make_app(spec, "SWE-bench Lite repair team (AutoGen agentchat) end to end on the embedded PBKV engine.")

if __name__ == "__main__":
    main(app, "python -m examples.swe_autogen")
