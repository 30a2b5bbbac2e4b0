"""The teaching side: tile programs on real numbers, their traces, on-chip state and traffic.

Imports only `simulator.core`."""
