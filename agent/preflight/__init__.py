"""A node's preflight: GPUs (NVML), /dev/shm, network, disk and limits, checked after plan agreement
and before Ray and the judges start, each timed (agent/preflight/_run.py); the GPU residue check at
teardown (_residue.py); `python -m agent.preflight SPEC` for one node alone (gym-launch preflight)."""
