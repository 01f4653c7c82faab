"""FinanceBench + CrewAI: a static sequential crew over real evidence pages (with KVFlow)."""
