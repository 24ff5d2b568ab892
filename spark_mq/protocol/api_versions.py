"""ApiVersions (key 18): which APIs and versions a broker implements."""

from __future__ import annotations

import msgspec


class ApiVersionsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Ask a broker what it implements; the first request a client sends."""

    client_software_name: str = "spark-mq"
    client_software_version: str = ""


class ApiVersionRange(msgspec.Struct, array_like=True):
    """The versions of one API a broker implements, both ends included."""

    api_key: int
    min_version: int
    max_version: int


class ApiVersionsResponse(msgspec.Struct, array_like=True):
    """The APIs a broker implements, with its identity.

    ``broker_epoch`` increases every time a broker process takes over a log directory
    (the embedded local broker) so a client can tell it reconnected to a new incarnation.
    """

    error_code: int
    api_keys: list[ApiVersionRange]
    broker_id: int = 0
    broker_epoch: int = 0
    cluster_id: str = ""
    software_version: str = ""
    throttle_time_ms: int = 0


def api_versions_error(_: ApiVersionsRequest, code: int, _message: str) -> ApiVersionsResponse:
    """ApiVersions failed: ``code`` and no APIs (the response has no message)."""
    return ApiVersionsResponse(code, [])
