"""Watching a spark_mq deployment from outside: the consumer lag exporter (a client of the
brokers, as kafka-lag-exporter and Burrow are Kafka's)."""
