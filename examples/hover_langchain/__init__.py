"""HoVer claims + LangGraph: the main example (decompose, query, retrieve, summarise, verify loops)."""
