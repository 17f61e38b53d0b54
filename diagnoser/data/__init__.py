"""Data files: hardware and model presets, kernel-class patterns."""
