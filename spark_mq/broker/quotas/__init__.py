"""Client quotas (Kafka's ClientQuotaManager, KIP-13/55/124/219/546): who has which quota
(:mod:`.entity`), where quotas are kept (:mod:`.store`; a cluster's are ZooKeeper's,
:mod:`spark_mq.broker.zk.client_quotas`), the rate each client is measured at
(:mod:`.rate`) and the throttle time a client over its quota gets (:mod:`.manager`)."""
