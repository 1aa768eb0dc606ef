"""The closed post-training loop."""
