"""Speaking Kafka as a client: the floor the broker's follower fetchers and probes and our client share.

- `connection`: `BrokerConnection`, one TCP (optionally TLS and SASL) connection with request/response
  correlation, version negotiation and timeouts; `security`: what a connection needs to authenticate.
- `messages`: kio requests built from version-free descriptions and the client's API version choices.
- `produce`, `fetch`: both directions of the hot codecs, hand-written; `fields`, `chunks`: what they share.
- `errors`: the errors a client raises itself (timeouts, lost connections, bad settings) beside the
  protocol room's one class per Kafka error code.
- `reassignment`: a partition reassignment in progress, as the controller records it and Admin returns it.

This room imports only `backbone.protocol`; the broker and the client both import it and never each other.
"""
