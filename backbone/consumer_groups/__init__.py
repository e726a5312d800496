"""Consumer groups: the group coordinator, its membership state machine, the committed-offsets store
(the internal topic `__consumer_offsets`), partition assignors and lag computation."""
