"""Security and fairness: who a connection is (principals from TLS or SASL), what it may do
(ACLs) and how much it may use (quotas)."""
