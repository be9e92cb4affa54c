"""Audit a run directory: schemas, cross-checks, first cause, reports."""
