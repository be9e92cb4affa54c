"""The agent's Ray node: `ray start` argv and ports, the readiness probe, Ray's session logs."""
