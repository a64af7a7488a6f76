"""What every benchmark shares: the quick mode and where results go (quick), the machine and commit a figure was
measured on (machine), results as strict JSON (json_safe), and a process's memory (memory)."""
