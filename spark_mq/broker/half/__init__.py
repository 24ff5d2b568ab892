"""Half messages (RocketMQ-style transactional messages with check-back): the broker's
service, its records and its settings. See docs/half_messages.md."""
