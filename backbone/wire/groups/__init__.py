"""What a consumer group means on the wire, shared by the broker's group coordinator and our consumer.

- `consumer_protocol`: the consumer protocol's Subscription and Assignment (the bytes a member sends in
  JoinGroup and the leader hands out through SyncGroup);
- `assignors`, `sticky`: Kafka's four partition assignors under Kafka's names, run by the group's leader;
- `lag`: a group's lag per partition and member, from committed offsets and log ends.

Pure code over protocol types: no connection, no broker state.
"""
