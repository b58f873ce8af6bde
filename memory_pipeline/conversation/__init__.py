"""Seed 002, rolling conversation summaries."""
