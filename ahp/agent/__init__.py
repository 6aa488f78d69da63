"""The agent layer: what an agent drives a terminal with (see ``docs/``)."""
