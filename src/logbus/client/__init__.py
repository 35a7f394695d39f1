"""logbus's blocking Kafka client, shared by the CLI tools, the web console and the Spark connector.

`client.py` is the client (`Client`: Metadata, then requests routed to a broker or a partition's
leader; ListOffsets and Fetch), on `connection.py` (one socket to one broker), `security.py`
(TLS and the SASL login from librdkafka-style settings) and `apis.py` (the request versions and
their kio classes); `errors.py` holds what it raises. `offset_reset.py` is the offset arithmetic
of a consumer group's reset. It speaks the Kafka protocol only and knows nothing of the broker:
it imports `protocol/` and `security/`, never `broker/` or `cluster/`.
"""
