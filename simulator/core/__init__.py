"""The types every part of the simulator shares: problem, tiles, precision, GPUs, the trace.

Nothing here imports the teaching or the timing side."""
