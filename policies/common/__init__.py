"""Blocks shared by the policies: normaliser, encoders, backbones, EMA, checkpoint I/O."""
