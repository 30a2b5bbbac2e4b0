"""Tile programs: each algorithm as the ordered operations of its CTAs, with counts per op."""
