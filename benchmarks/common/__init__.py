"""What benchmarks share: the machine a figure was measured on (machine), results as strict JSON (json_safe), and a
process's memory (memory). The quick mode's rule and a figure's commit are in tools (quick_mode, provenance), which
tools.mutation_score shares."""
