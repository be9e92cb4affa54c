"""The per-replica runtime: lifecycle, process groups, Ray, judges, liveness."""
