"""A Confluent-compatible schema registry: Avro schemas kept in a compacted topic, served over REST."""
