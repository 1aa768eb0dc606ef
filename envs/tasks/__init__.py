"""The MJCF tasks, one module each with its config, ground truth and scripted expert."""
