"""SASL authentication on a broker's SASL listeners: the SCRAM credential store
(:mod:`.credential_store`), the per-connection exchange (:mod:`.authenticator`) and the
broker's SASL settings (:mod:`.sasl_config`)."""
