"""The brokers' ZooKeeper layer: Kafka's znode layout and JSON (:mod:`.znodes`), a kazoo client
that handles connection states as Kafka does (:mod:`.client`), and controller election with
epoch-checked writes (:mod:`.controller_election`). The layout is drawn in docs/cluster.md.
"""
