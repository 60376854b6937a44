"""The replay engine: rank programs that move real bytes with a schedule's pattern, and their orchestrator."""
