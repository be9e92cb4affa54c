"""The launcher's backends: one package per scheduler (``slurm/``, ``beaker/``, ``skypilot/``: the
render, the submit and the read-only questions side by side), ``local.py``, and what they share
(``base.py``; ``asking.py`` and ``answers.py`` for the read-only side). The one list of backends is
``registry.py``.

The audit imports the schedulers' read-only modules (tests/test_import_graph.py), and importing
them runs this ``__init__`` first: so it imports nothing.
"""
