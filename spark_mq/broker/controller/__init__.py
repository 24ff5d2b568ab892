"""The cluster controller. Its pure logic (replica assignment, the partition and replica state
machines, leader election rules, the context and the per-broker request batch) talks to
neither ZooKeeper nor the network and is tested alone; the controller itself
(:mod:`.controller`), its leadership writes, topic deletion and its channel to the brokers
use the ZooKeeper layer (:mod:`spark_mq.broker.zk`) and broker connections. docs/cluster.md,
"The controller", describes it.
"""
