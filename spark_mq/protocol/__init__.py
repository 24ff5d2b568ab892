"""The client-broker wire protocol: frames, message types per API family, error codes.

``docs/protocol.md`` is the written contract; ``framing`` draws the byte layout. Modules:

- ``framing``: length-prefixed frames, request and response headers, the records section;
- ``api``: the API registry (``ApiKey``, versions) and message encoding;
- ``error_codes``: Kafka's numeric codes and their exception classes;
- one module per API family: ``api_versions``, ``metadata``, ``produce``, ``fetch``,
  ``offsets`` (ListOffsets, DeleteRecords), ``admin`` (topics and configs), ``producer_id``;
- ``address``: where a broker listens (TCP or a local socket).
"""
