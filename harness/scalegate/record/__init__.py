"""What stays on disk: run directories and their status, baselines with provenance and quarantine, updates."""
