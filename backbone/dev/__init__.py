"""Local clusters on one machine: broker processes and the `backbone dev` topology (ZooKeeper, clusters)."""
