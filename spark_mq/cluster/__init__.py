"""Local-cluster tooling: the pieces that run a ZooKeeper ensemble and brokers on one machine
for trying and testing a cluster (``spark-mq cluster start``, ``LocalCluster``).

Brokers themselves never import this package: a broker talks to ZooKeeper through
:mod:`spark_mq.broker.zk`, wherever that ZooKeeper runs.
"""
