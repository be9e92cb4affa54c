"""What every part of the agent uses, importing none of them: the clock, failures and the one
polling loop, NVML's opening, the pipe to the reaper. The bottom layer of agent/ (ARCHITECTURE.md,
"Layers inside agent/")."""
