"""Local processes: process groups, the supervisor, signals, wake-ups, waits, priorities, fast exit."""
