"""Coordination through the run directory: rank claim and rendezvous, attempts, liveness, failure records."""
