"""Loads the fake NVML binding at interpreter start in every process that has this folder on its
PYTHONPATH: the agent asks NVML without importing the binding on a machine with no driver library
(agent/ground/nvml.py), unless a binding is already loaded; the stand-in must answer for itself."""

import pynvml  # noqa: F401  (the fake beside this file)
