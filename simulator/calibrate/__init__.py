"""Calibration and validation of the timing engine against measured kernels.

Imports `simulator.core` and `simulator.timing`."""
