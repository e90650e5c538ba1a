"""
Receiver-side verification of webhook deliveries: the `x-svc-signature` header is `sha256=` +
the hex HMAC-SHA-256 of the raw request body, keyed with the webhook's signing secret (the UTF-8
bytes of the secret string exactly as returned at creation, `whsec_` prefix included). The same
algorithm as `@svc/sdk`'s `verifyWebhook`.

Compute over the raw bytes as received, never over re-serialised JSON.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Optional, Sequence, Union

__all__ = [
    "WEBHOOK_DELIVERY_ID_HEADER",
    "WEBHOOK_EVENT_HEADER",
    "WEBHOOK_ID_HEADER",
    "WEBHOOK_SIGNATURE_HEADER",
    "check_webhook_signature",
    "verify_webhook",
]

WEBHOOK_SIGNATURE_HEADER = "x-svc-signature"
WEBHOOK_EVENT_HEADER = "x-svc-event"
WEBHOOK_ID_HEADER = "x-svc-delivery-webhook-id"
WEBHOOK_DELIVERY_ID_HEADER = "x-svc-delivery-id"

_PREFIX = "sha256="
_HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")

Signature = Union[str, Sequence[str], None]


def check_webhook_signature(secret: str, raw_body: Union[bytes, bytearray, str], signature: Signature) -> Optional[str]:
    """
    Why a delivery does not verify, or None when it does: `missing_secret`, `invalid_body`,
    `missing_signature`, `malformed_signature`, `signature_mismatch`.
    """
    if not isinstance(secret, str) or secret == "":
        return "missing_secret"
    if isinstance(raw_body, str):
        body = raw_body.encode("utf-8")
    elif isinstance(raw_body, (bytes, bytearray)):
        body = bytes(raw_body)
    else:
        # The usual mistake: passing the parsed JSON instead of the bytes that were signed.
        return "invalid_body"
    # One delivery carries one signature; several headers are refused rather than guessed between.
    if isinstance(signature, str):
        value: Optional[str] = signature
    elif signature is not None and len(signature) == 1 and isinstance(signature[0], str):
        value = signature[0]
    else:
        value = None
    if value is None or value == "":
        return "missing_signature"
    if not value.startswith(_PREFIX) or _HEX_SHA256.fullmatch(value[len(_PREFIX) :]) is None:
        return "malformed_signature"
    expected = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).digest()
    if not hmac.compare_digest(bytes.fromhex(value[len(_PREFIX) :]), expected):
        return "signature_mismatch"
    return None


def verify_webhook(secret: str, raw_body: Union[bytes, bytearray, str], signature: Signature) -> bool:
    """True when the delivery's `x-svc-signature` matches its raw body and your secret. Never raises."""
    return check_webhook_signature(secret, raw_body, signature) is None
