"""`logbus console`: a web console for any Kafka-compatible cluster, a Kafka client like any other.

It talks to the cluster over the Kafka protocol only (confluent-kafka), never to broker internals:
`cluster_view` reads, `admin` acts, `messages` browses records, `history` keeps the lag and
throughput series the sampler in `app` records, `charts` draws them as SVG, `metrics` scrapes
brokers' Prometheus endpoints.
"""
