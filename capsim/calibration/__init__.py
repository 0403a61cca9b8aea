"""Measured step-time calibration: shapes, tables, loader, validation report."""
