"""Side-by-side benchmark suite: logbus against Kafka-compatible peers, Redis Streams and NATS JetStream.

Run it with `python -m bench.suite` (or `python bench/run_suite.py`); see bench/suite/README.md.
"""
