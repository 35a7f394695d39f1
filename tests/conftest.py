"""Shared fixtures: real brokers come from logbus.testing (the `logbus_broker` fixture)."""
