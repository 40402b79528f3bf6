"""Programs jarvis runs in other processes (the RLM REPL, in-container runners)."""
