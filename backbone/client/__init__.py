"""Our Kafka client: Producer, Consumer and Admin, an asyncio core with a synchronous face."""
