"""LeRobot's policies behind our `Policy` interface (needs LeRobot installed; see configuration_lerobot)."""
