"""Authorization: Kafka's AclAuthorizer (``authorizer.py``), where ACLs are kept (a file in
the log directory of a single node, ZooKeeper in a cluster), and what each API checks
(``checks.py``)."""
