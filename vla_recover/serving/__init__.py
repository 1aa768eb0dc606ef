"""A policy server (``vla-recover serve``) and its client: one device's forwards shared by many robots."""
