"""logbus's blocking Kafka client, shared by the CLI tools, the web console and the Spark connector.

`client.py` is the client (`Client`: Metadata, then requests routed to a broker or a partition's
leader; ListOffsets and Fetch), on `connection.py` (one socket to one broker), `security.py`
(TLS and the SASL login from librdkafka-style settings) and `apis.py` (the request versions and
their kio classes); `errors.py` holds what it raises. The CLI and the console share `admin.py`
(DescribeLogDirs, `KEY=VALUE` config entries) and `offset_reset.py` (where a consumer group's
offsets go on a reset). It speaks the Kafka protocol only and knows nothing of the broker:
it imports `protocol/` and `security/`, never `broker/` or `cluster/`.
"""
