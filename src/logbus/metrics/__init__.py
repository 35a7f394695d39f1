"""Prometheus metrics, named as the JMX exporter names Kafka's MBeans (docs/operations.md, "Metrics").

`counters.py` holds what the request path counts (plain integers, no lock: everything runs on
the event loop), `collectors.py` turns counters and broker state into Prometheus families at
scrape time, `http.py` serves them at `/metrics` on `metrics.host:metrics.port`. The broker
wires them in `broker/metrics.py`; nothing here knows the broker.
"""
