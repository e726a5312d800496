"""The Kafka wire protocol: framing, API messages, error codes and the record batch format."""
