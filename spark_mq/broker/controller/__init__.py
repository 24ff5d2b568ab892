"""The controller's pure logic: replica assignment, the partition and replica state machines
and leader election rules. Nothing here talks to ZooKeeper or the network, so all of it is
tested alone; the ZooKeeper side lives in :mod:`spark_mq.broker.zk`.
"""
