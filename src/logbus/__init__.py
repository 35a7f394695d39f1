"""logbus: a Kafka-compatible commit log broker in Python."""

__version__ = "0.1.0"
