"""Mirror maker: consumer/producer pairs copying a source cluster's topics into a target cluster, at least
once, with a provenance header on every copy (see mirror.py)."""
