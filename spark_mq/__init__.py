"""spark_mq (the public API is assembled once the log manager lands)."""
