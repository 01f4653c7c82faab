"""SWE-bench Lite + AutoGen agentchat: planner, coder, tester, analyzer with retry loops."""
