"""logbus's blocking Kafka client, shared by the CLI tools, the web console and the Spark connector.

`client.py` is the client (`Client`: Metadata, then requests routed to a broker or a partition's
leader), `offset_reset.py` the offset arithmetic of a consumer group's reset. It speaks the Kafka
protocol only and knows nothing of the broker: it imports `protocol/` and `security/`, never
`broker/` or `cluster/`.
"""
