"""The broker: the asyncio Kafka-protocol server, its request handlers and the partitions it hosts."""
