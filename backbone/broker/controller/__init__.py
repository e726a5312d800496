"""The controller and what it relies on.

Decisions (pure, no I/O): leader_decisions.py (who leads, which ISR) and reassignment_decisions.py (the
recorded states of a move). Writes: fenced_writes.py, the only place the controller writes to ZooKeeper,
each write fenced by the controller epoch. Carrying decisions out: control_loop.py (the `Controller`,
failover elections), requested_elections.py (ElectLeaders, preferred-leader rebalancing) and
reassignment_work.py (starting, cancelling and finishing moves). liveness.py probes the other brokers; its
verdict is what the controller treats as dead.
"""
