"""The `vla-recover` command line."""
