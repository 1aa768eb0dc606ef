"""Diffusion policy: DDPM training, DDIM inference over action chunks (diffusers schedulers)."""
