"""The timing side: occupancy, per-CTA workloads, launches, the L2 model and the engine.

Imports only `simulator.core`."""
