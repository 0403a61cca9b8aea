"""Figures and the HTML report built from a sweep results directory (never simulates)."""
