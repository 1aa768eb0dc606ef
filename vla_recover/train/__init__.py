"""Training: one trainer, weighters that turn the store into per-step weights."""
