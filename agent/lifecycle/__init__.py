"""The agent's lifecycle: the step tables, the state machine, the Agent that wires them, its run context."""
