"""Everything the project knows of SkyPilot, in one place.

- ``_render.py``: the task of a run (pure).
- ``submit.py``: its launch through SkyPilot's Python API, and the backend the launcher drives
  (``SKYPILOT``).
- ``query.py``: the read-only questions (the configured API server's health, a job's record) and
  their reading, for ``gym-launch status`` and the audit.

The audit imports ``query`` only (tests/test_import_graph.py): so this package's ``__init__``
imports nothing.
"""
