"""The Edge Core status record (spec §2.6, wire-format.md "Edge Core"): what GET /status answers."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

CONNECTING, CONNECTED, ERROR = "connecting", "connected", "error"

_encoder = msgspec.json.Encoder(order="sorted")


@dataclass(slots=True)
class EdgeStatus:
    """Follows the real upstream connection; `error_code`/`error_description` only while in `error`."""

    endpoint_name: str
    lwm2m_server_uri: str
    edge_version: str
    account_id: str = ""
    internal_id: str = ""
    status: str = CONNECTING
    error_code: int = 0
    error_description: str = ""

    def connecting(self) -> None:
        self.status, self.internal_id = CONNECTING, ""

    def connected(self, account_id: str, internal_id: str) -> None:
        self.status, self.account_id, self.internal_id = CONNECTED, account_id, internal_id

    def failed(self, code: int, description: str) -> None:
        self.status, self.internal_id = ERROR, ""
        self.error_code, self.error_description = code, description

    def body(self) -> bytes:
        """The JSON array of one record, compact, keys sorted."""
        record: dict[str, object] = {
            "account-id": self.account_id,
            "edge-version": self.edge_version,
            "endpoint-name": self.endpoint_name,
            "internal-id": self.internal_id,
            "lwm2m-server-uri": self.lwm2m_server_uri,
            "status": self.status,
        }
        if self.status == ERROR:
            record["error_code"] = self.error_code
            record["error_description"] = self.error_description
        return _encoder.encode([record])
