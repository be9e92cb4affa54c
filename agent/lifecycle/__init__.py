"""The agent's lifecycle: INIT, the step tables, the state machine, the Agent that walks them,
the wiring of its runtimes and its teardown."""
