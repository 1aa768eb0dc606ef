"""Flow-matching policy: a rectified-flow velocity field over action chunks, few-step Euler inference."""
