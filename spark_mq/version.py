"""The version of spark_mq, in a module of its own at the bottom of the layers so the broker
(ApiVersions' ``software_version``) reads it without importing the root package."""

__version__ = "0.1.0"
