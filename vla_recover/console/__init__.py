"""The operator console: a web app over the fleet and the store (``vla-recover console``)."""
