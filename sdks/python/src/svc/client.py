"""The client: `Svc(api_url=None, api_key=None)`, composing the resources over one transport."""

from __future__ import annotations

import ssl
from types import TracebackType
from typing import Dict, Optional, Sequence, Type, Union

from ._http import Http
from .events import EventStream
from .resources import Apps, Audit, Billing, Keys, OrgResource, Secrets, Templates, Volumes, Webhooks, Workers
from .sandboxes import Sandboxes
from .types import Usage, WhoAmI
from .webhooks import Signature, verify_webhook

__all__ = ["Svc"]


class Svc:
    """
    The client. `api_url` defaults to `SVC_API_URL` (else http://127.0.0.1:8080) and `api_key` to
    `SVC_API_KEY`. `timeout`: the longest wait for an answer of a call, in seconds (the waits of
    `create`, `stop`... have their own). `max_retries`: how many times a 429 or 503 answer is
    retried, after its `Retry-After` (at most `max_retry_wait` s). Safe to share across threads:
    each thread keeps its own connection alive.
    """

    def __init__(
        self,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_retry_wait: float = 60.0,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        self._http = Http(
            api_url, api_key, timeout=timeout, max_retries=max_retries, max_retry_wait=max_retry_wait, ssl_context=ssl_context
        )
        self.templates = Templates(self._http)
        self.sandboxes = Sandboxes(self._http, self.templates)
        self.volumes = Volumes(self._http)
        self.apps = Apps(self._http)
        self.secrets = Secrets(self._http)
        self.webhooks = Webhooks(self._http)
        self.keys = Keys(self._http)
        #: The org's record: `get()`, `update(name)`.
        self.org = OrgResource(self._http)
        #: The org's audit log: `list(action=, limit=, offset=)`.
        self.audit = Audit(self._http)
        #: Spend and limits: `usage()`, `set_limits(hard_limit_micros=, alert_micros=)`.
        self.billing = Billing(self._http)
        #: The platform's worker processes: `list()`.
        self.workers = Workers(self._http)

    def __repr__(self) -> str:
        return f"Svc(api_url={self.api_url!r})"  # never the key

    @property
    def api_url(self) -> str:
        return self._http.api_url

    def events(
        self, events: Optional[Sequence[str]] = None, *, last_event_id: Optional[str] = None, reconnect: bool = True
    ) -> EventStream:
        """The org's events as they happen (see `EventStream`); `events`: only these names (exact)."""
        return EventStream(self._http, events, last_event_id, reconnect)

    def whoami(self) -> WhoAmI:
        """Who the key is: its org, scopes, user (any valid key)."""
        me: WhoAmI = self._http.json("GET", "/v1/auth/me")
        return me

    def health(self) -> Dict[str, str]:
        """The API's health: `{"status": "ok", "postgres": "up", "nats": "up"}`."""
        health: Dict[str, str] = self._http.json("GET", "/v1/health")
        return health

    def usage(self) -> Usage:
        """This period's spend and limits (the same as `billing.usage()`)."""
        return self.billing.usage()

    @staticmethod
    def verify_webhook(secret: str, raw_body: Union[bytes, bytearray, str], signature: Signature) -> bool:
        """True when a delivery's `x-svc-signature` matches its raw body and the webhook's secret."""
        return verify_webhook(secret, raw_body, signature)

    def close(self) -> None:
        """Closes the kept-alive connections (a later call opens new ones)."""
        self._http.close()

    def __enter__(self) -> Svc:
        return self

    def __exit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], trace: Optional[TracebackType]
    ) -> None:
        self.close()
