"""What the benchmark scripts share (not scripts themselves)."""
