"""Everything the project knows of Slurm, in one place.

- ``_render.py``: the batch script of a run (pure).
- ``submit.py``: ``sbatch``, and the backend the launcher drives (``SLURM``).
- ``query.py``: the read-only questions (``scontrol show job|node|partition``) and their parsing, for
  ``gym-launch status``, ``gym-launch regrade`` and the audit.
- ``ending.py``: slurmstepd's words in a job's output: how each start of the job ended.

The audit imports ``query`` and ``ending`` only (tests/test_import_graph.py): so this package's
``__init__`` imports nothing.
"""
