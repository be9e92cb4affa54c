"""Everything the project knows of Beaker, in one place.

- ``_render.py``: the experiment spec of a run (pure).
- ``submit.py``: the experiment's creation with beaker-py's client, and the backend the launcher
  drives (``BEAKER``).
- ``query.py``: the read-only questions (an experiment's workload and replica jobs, a job's
  cancelation code) and their reading, for ``gym-launch status`` and the audit.

The audit imports ``query`` only (tests/test_import_graph.py): so this package's ``__init__``
imports nothing.
"""
