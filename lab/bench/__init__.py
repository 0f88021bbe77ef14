"""Measurements, each side by side with its reference in the same run (machines here are noisy)."""
