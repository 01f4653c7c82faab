"""``python -m examples.finance_crewai``: the main job on FinanceBench with the CrewAI crew (and KVFlow)."""

from examples.common.cli import main, make_app
from examples.finance_crewai.run import spec

app = make_app(spec, "FinanceBench crew (CrewAI) end to end on the embedded PBKV engine, with KVFlow.")

if __name__ == "__main__":
    main(app, "python -m examples.finance_crewai")
