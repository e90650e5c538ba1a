"""
The org's other resources: `svc.templates`, `volumes`, `apps`, `secrets`, `webhooks` (the
endpoints; verifying a delivery is `svc.verify_webhook`), `keys`, `org`, `audit`, `billing`,
`workers`. Each method is one route of the contract and returns its JSON.
"""

from __future__ import annotations

import base64
import io
import os
import tarfile
from typing import Any, Dict, Generator, Iterator, List, Mapping, Optional, Sequence, Union

from ._http import Http, SvcError, check_int, check_str, check_str_list, check_str_map, drop_none, invalid, segment
from .sandboxes import DEFAULT_WAIT, poll
from .types import (
    ApiKey,
    App,
    AppPage,
    AuditPage,
    CreatedApiKey,
    CreatedWebhook,
    DeliveryPage,
    KeyPage,
    Org,
    Secret,
    SecretPage,
    Template,
    TemplatePage,
    Usage,
    Volume,
    VolumePage,
    Webhook,
    WebhookPage,
    Worker,
)

__all__ = ["Apps", "Audit", "Billing", "Keys", "OrgResource", "Secrets", "Templates", "Volumes", "Webhooks", "Workers"]


def _page_query(limit: Optional[int], offset: Optional[int]) -> Dict[str, Any]:
    check_int(limit, "limit", required=False, low=1)
    check_int(offset, "offset", required=False, low=0)
    return {"limit": limit, "offset": offset}


def pack_context(context: Union[str, "os.PathLike[str]", bytes]) -> str:
    """
    A Dockerfile's `context` as the API takes it (base64 of a tar.gz): a local folder packed
    (its files, folders and symlinks, names relative to it), or a tar.gz's bytes as they are.
    """
    if isinstance(context, (bytes, bytearray)):
        return base64.b64encode(bytes(context)).decode("ascii")
    if not isinstance(context, (str, os.PathLike)):
        invalid("context", "must be a folder's path or a tar.gz's bytes")
    root = os.fspath(context)
    if not os.path.isdir(root):
        invalid("context", f"{root} is not a folder")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(os.listdir(root)):
            # Owners are the sandbox's business (COPY --chown), not this machine's.
            archive.add(os.path.join(root, name), arcname=name, filter=_anonymous)
    return base64.b64encode(out.getvalue()).decode("ascii")


def _anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


class Templates:
    """`svc.templates`: root file systems built from steps, their build logs, waiting for a build."""

    def __init__(self, http: Http) -> None:
        self._http = http

    def create(
        self,
        name: str,
        *,
        base: Optional[str] = None,
        steps: Optional[Sequence[Mapping[str, Any]]] = None,
        start_cmd: Optional[str] = None,
        ready_cmd: Optional[str] = None,
        image: Optional[str] = None,
        registry_secret: Optional[str] = None,
        dockerfile: Optional[str] = None,
        context: Optional[Union[str, "os.PathLike[str]", bytes]] = None,
        build_args: Optional[Mapping[str, str]] = None,
        wait: bool = True,
        timeout: float = DEFAULT_WAIT,
        **params: Any,
    ) -> Template:
        """
        Builds a template from steps (`[{"run": "..."}, {"file": {...}}, {"env": {...}}]`) on
        `base`, from an OCI `image` (`registry_secret`: the secret holding a private registry's
        credential), or from a `dockerfile` whose `context` is a local folder (packed here as a
        tar.gz) or a tar.gz's bytes, with `build_args`; `start_cmd` and `ready_cmd` are shell
        lines. Returns once `ready` (a SvcError `template_failed` if the build fails) unless
        `wait=False`. The other fields of the API's body (`pool_size`...) pass through `**params`.
        """
        check_str(name, "name")
        check_str(base, "base", required=False)
        check_str(start_cmd, "start_cmd", required=False)
        check_str(ready_cmd, "ready_cmd", required=False)
        check_str(image, "image", required=False)
        check_str(registry_secret, "registry_secret", required=False)
        check_str(dockerfile, "dockerfile", required=False)
        if build_args is not None:
            check_str_map(build_args, "build_args")
        if steps is not None and (isinstance(steps, (str, bytes)) or not all(isinstance(s, Mapping) for s in steps)):
            invalid("steps", "must be a list of step objects")
        body = drop_none(
            {
                "name": name,
                "base": base,
                "steps": steps,
                "start_cmd": start_cmd,
                "ready_cmd": ready_cmd,
                "image": image,
                "registry_secret": registry_secret,
                "dockerfile": dockerfile,
                "context": None if context is None else pack_context(context),
                "build_args": None if build_args is None else dict(build_args),
                **params,
            }
        )
        template: Template = self._http.json("POST", "/v1/templates", json=body)
        return self.wait_for(template["id"], timeout) if wait else template

    def list(self, *, limit: Optional[int] = None, offset: Optional[int] = None) -> TemplatePage:
        page: TemplatePage = self._http.json("GET", "/v1/templates", query=_page_query(limit, offset))
        return page

    def get(self, id_or_name: str) -> Template:
        """By id or name."""
        check_str(id_or_name, "id_or_name")
        template: Template = self._http.json("GET", f"/v1/templates/{segment(id_or_name)}")
        return template

    def delete(self, id_or_name: str) -> Template:
        """Refused (409) while a sandbox uses it."""
        check_str(id_or_name, "id_or_name")
        template: Template = self._http.json("DELETE", f"/v1/templates/{segment(id_or_name)}")
        return template

    def update(self, id_or_name: str, *, pool_size: int) -> Template:
        """
        Sets its warm pool: `pool_size` (0 to 50) sandboxes kept booted and handed out on create,
        so that a create is as fast as from `base`; 0 drains it.
        """
        check_str(id_or_name, "id_or_name")
        check_int(pool_size, "pool_size", low=0)
        template: Template = self._http.json("PATCH", f"/v1/templates/{segment(id_or_name)}", json={"pool_size": pool_size})
        return template

    def logs(self, id_or_name: str) -> str:
        """The build log so far."""
        check_str(id_or_name, "id_or_name")
        return self._http.request("GET", f"/v1/templates/{segment(id_or_name)}/logs").body.decode("utf-8", "replace")

    def follow_logs(self, id_or_name: str) -> Generator[str, None, None]:
        """The build log as it is written, until the build ends."""
        check_str(id_or_name, "id_or_name")
        stream = self._http.stream("GET", f"/v1/templates/{segment(id_or_name)}/logs", query={"follow": "true"})

        def pieces() -> Generator[str, None, None]:
            import codecs

            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            try:
                for chunk in stream.chunks():
                    text = decoder.decode(chunk)
                    if text:
                        yield text
                rest = decoder.decode(b"", final=True)
                if rest:
                    yield rest
            finally:
                stream.close()

        return pieces()

    def wait_for(self, id_or_name: str, timeout: float = DEFAULT_WAIT) -> Template:
        """Returns once the build ended `ready`; `failed` is a SvcError `template_failed`."""
        def built(t: Template) -> bool:
            return t["state"] != "building"

        template = poll(lambda: self.get(id_or_name), built, timeout, f"template {id_or_name} is still building")
        if template["state"] == "failed":
            raise SvcError(
                0,
                "template_failed",
                f"template {template['name']} failed: {template.get('errorMessage') or 'no message'}",
                {"template": template},
            )
        return template


class Volumes:
    """`svc.volumes`: persistent disks that sandboxes mount."""

    def __init__(self, http: Http) -> None:
        self._http = http

    def create(
        self, size_gb: int, *, name: Optional[str] = None, type: Optional[str] = None, idempotency_key: Optional[str] = None
    ) -> Volume:
        check_int(size_gb, "size_gb", low=1)
        check_str(name, "name", required=False)
        check_str(type, "type", required=False)
        body = drop_none({"size_gb": size_gb, "name": name, "type": type})
        volume: Volume = self._http.json("POST", "/v1/volumes", json=body, headers={"Idempotency-Key": idempotency_key})
        return volume

    def list(self, *, limit: Optional[int] = None, offset: Optional[int] = None) -> VolumePage:
        page: VolumePage = self._http.json("GET", "/v1/volumes", query=_page_query(limit, offset))
        return page

    def get(self, volume_id: str) -> Volume:
        check_str(volume_id, "volume_id")
        volume: Volume = self._http.json("GET", f"/v1/volumes/{segment(volume_id)}")
        return volume

    def delete(self, volume_id: str) -> Volume:
        """Refused (409) while a sandbox has it."""
        check_str(volume_id, "volume_id")
        volume: Volume = self._http.json("DELETE", f"/v1/volumes/{segment(volume_id)}")
        return volume


class Apps:
    """`svc.apps`: long-running deployments, `replicas` sandboxes of a template running a command."""

    def __init__(self, http: Http) -> None:
        self._http = http

    def create(
        self,
        name: str,
        *,
        template: str,
        cmd: Sequence[str],
        replicas: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        exposed_ports: Optional[Sequence[int]] = None,
        idempotency_key: Optional[str] = None,
    ) -> App:
        """Answers at once (`deploying`); `wait_until_running` waits for the replicas."""
        check_str(name, "name")
        check_str(template, "template")
        check_str_list(cmd, "cmd")
        check_int(replicas, "replicas", required=False, low=0)
        check_str_map(env, "env")
        body = drop_none(
            {"name": name, "template": template, "cmd": cmd, "replicas": replicas, "env": env, "exposed_ports": exposed_ports}
        )
        app: App = self._http.json("POST", "/v1/apps", json=body, headers={"Idempotency-Key": idempotency_key})
        return app

    def list(self, *, limit: Optional[int] = None, offset: Optional[int] = None) -> AppPage:
        page: AppPage = self._http.json("GET", "/v1/apps", query=_page_query(limit, offset))
        return page

    def get(self, app_id: str) -> App:
        check_str(app_id, "app_id")
        app: App = self._http.json("GET", f"/v1/apps/{segment(app_id)}")
        return app

    def update(
        self,
        app_id: str,
        *,
        replicas: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        cmd: Optional[Sequence[str]] = None,
    ) -> App:
        """Replaces what it names; a new `cmd` or `env` rolls the replicas over one at a time."""
        check_str(app_id, "app_id")
        check_int(replicas, "replicas", required=False, low=0)
        check_str_map(env, "env")
        check_str_list(cmd, "cmd", required=False)
        app: App = self._http.json(
            "PATCH", f"/v1/apps/{segment(app_id)}", json=drop_none({"replicas": replicas, "env": env, "cmd": cmd})
        )
        return app

    def scale(self, app_id: str, replicas: int) -> App:
        return self.update(app_id, replicas=replicas)

    def delete(self, app_id: str) -> App:
        """The app and its sandboxes go (`deleting`, then not found)."""
        check_str(app_id, "app_id")
        app: App = self._http.json("DELETE", f"/v1/apps/{segment(app_id)}")
        return app

    def wait_until_running(self, app_id: str, timeout: float = 120.0) -> App:
        """Returns once every replica is ready (`running`); a SvcError `timeout` after `timeout` s."""
        def running(app: App) -> bool:
            return app["state"] == "running"

        return poll(lambda: self.get(app_id), running, timeout, f"app {app_id} is not running")


class Secrets:
    """`svc.secrets`: values sandboxes use through the egress proxy, never returned by the API."""

    def __init__(self, http: Http) -> None:
        self._http = http

    def create(
        self,
        name: str,
        value: str,
        *,
        allowed_hosts: Sequence[str],
        header_name: Optional[str] = None,
        header_format: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Secret:
        """The value is sent once and never returned by the API (nor shown by this client)."""
        check_str(name, "name")
        if not isinstance(value, str) or value == "":
            invalid("value", "must be a non-empty string")  # never echoes the value
        check_str_list(allowed_hosts, "allowed_hosts")
        check_str(header_name, "header_name", required=False)
        check_str(header_format, "header_format", required=False)
        body = drop_none(
            {
                "name": name,
                "value": value,
                "allowed_hosts": allowed_hosts,
                "header_name": header_name,
                "header_format": header_format,
            }
        )
        secret: Secret = self._http.json("POST", "/v1/secrets", json=body, headers={"Idempotency-Key": idempotency_key})
        return secret

    def list(self, *, limit: Optional[int] = None, offset: Optional[int] = None) -> SecretPage:
        page: SecretPage = self._http.json("GET", "/v1/secrets", query=_page_query(limit, offset))
        return page

    def get(self, secret_id: str) -> Secret:
        check_str(secret_id, "secret_id")
        secret: Secret = self._http.json("GET", f"/v1/secrets/{segment(secret_id)}")
        return secret

    def rotate(self, secret_id: str, value: str) -> Secret:
        """Replaces the value."""
        check_str(secret_id, "secret_id")
        if not isinstance(value, str) or value == "":
            invalid("value", "must be a non-empty string")
        secret: Secret = self._http.json("PUT", f"/v1/secrets/{segment(secret_id)}/value", json={"value": value})
        return secret

    def update(
        self,
        secret_id: str,
        *,
        allowed_hosts: Optional[Sequence[str]] = None,
        header_name: Optional[str] = None,
        header_format: Optional[str] = None,
    ) -> Secret:
        check_str(secret_id, "secret_id")
        check_str_list(allowed_hosts, "allowed_hosts", required=False)
        body = drop_none({"allowed_hosts": allowed_hosts, "header_name": header_name, "header_format": header_format})
        secret: Secret = self._http.json("PATCH", f"/v1/secrets/{segment(secret_id)}", json=body)
        return secret

    def delete(self, secret_id: str) -> Secret:
        check_str(secret_id, "secret_id")
        secret: Secret = self._http.json("DELETE", f"/v1/secrets/{segment(secret_id)}")
        return secret


class Webhooks:
    """`svc.webhooks`: the org's webhook endpoints, their deliveries, tests and retries."""

    def __init__(self, http: Http) -> None:
        self._http = http

    def create(
        self,
        url: str,
        *,
        events: Optional[Sequence[str]] = None,
        secret: Optional[str] = None,
        enabled: Optional[bool] = None,
        idempotency_key: Optional[str] = None,
    ) -> CreatedWebhook:
        """The answer's `secret_returned_once` is the signing secret, shown this once (`verify_webhook`)."""
        check_str(url, "url")
        check_str_list(events, "events", required=False)
        body = drop_none({"url": url, "events": events, "secret": secret, "enabled": enabled})
        created: CreatedWebhook = self._http.json("POST", "/v1/webhooks", json=body, headers={"Idempotency-Key": idempotency_key})
        return created

    def list(self, *, limit: Optional[int] = None, offset: Optional[int] = None) -> WebhookPage:
        page: WebhookPage = self._http.json("GET", "/v1/webhooks", query=_page_query(limit, offset))
        return page

    def get(self, webhook_id: str) -> Webhook:
        check_str(webhook_id, "webhook_id")
        webhook: Webhook = self._http.json("GET", f"/v1/webhooks/{segment(webhook_id)}")
        return webhook

    def update(
        self,
        webhook_id: str,
        *,
        url: Optional[str] = None,
        events: Optional[Sequence[str]] = None,
        enabled: Optional[bool] = None,
    ) -> Webhook:
        check_str(webhook_id, "webhook_id")
        check_str_list(events, "events", required=False)
        body = drop_none({"url": url, "events": events, "enabled": enabled})
        webhook: Webhook = self._http.json("PATCH", f"/v1/webhooks/{segment(webhook_id)}", json=body)
        return webhook

    def delete(self, webhook_id: str) -> None:
        check_str(webhook_id, "webhook_id")
        self._http.request("DELETE", f"/v1/webhooks/{segment(webhook_id)}")

    def test(self, webhook_id: str) -> Dict[str, str]:
        """Sends a `ping` through the real delivery path: `{"delivery_id": ...}`."""
        check_str(webhook_id, "webhook_id")
        answer: Dict[str, str] = self._http.json("POST", f"/v1/webhooks/{segment(webhook_id)}/test")
        return answer

    def deliveries(
        self, webhook_id: str, *, status: Optional[str] = None, limit: Optional[int] = None, offset: Optional[int] = None
    ) -> DeliveryPage:
        """Delivery attempts, newest first."""
        check_str(webhook_id, "webhook_id")
        page: DeliveryPage = self._http.json(
            "GET", f"/v1/webhooks/{segment(webhook_id)}/deliveries", query={"status": status, **_page_query(limit, offset)}
        )
        return page

    def retry(self, webhook_id: str, delivery_id: str) -> Dict[str, str]:
        """Retries a `failed` or `dead_letter` delivery."""
        check_str(webhook_id, "webhook_id")
        check_str(delivery_id, "delivery_id")
        answer: Dict[str, str] = self._http.json(
            "POST", f"/v1/webhooks/{segment(webhook_id)}/deliveries/{segment(delivery_id)}/retry"
        )
        return answer


class Keys:
    """`svc.keys`: the API keys of the org (a full-access key or a session manages them)."""

    def __init__(self, http: Http) -> None:
        self._http = http

    def create(self, name: str, *, scopes: Optional[Sequence[str]] = None, expires_at: Optional[str] = None) -> CreatedApiKey:
        """The answer's `token` is the key, shown this once."""
        check_str(name, "name")
        check_str_list(scopes, "scopes", required=False)
        check_str(expires_at, "expires_at", required=False)
        created: CreatedApiKey = self._http.json(
            "POST", "/v1/auth/api-keys", json=drop_none({"name": name, "scopes": scopes, "expires_at": expires_at})
        )
        return created

    def list(self, *, limit: Optional[int] = None, offset: Optional[int] = None) -> KeyPage:
        """Revoked keys included."""
        page: KeyPage = self._http.json("GET", "/v1/auth/api-keys", query=_page_query(limit, offset))
        return page

    def revoke(self, key_id: str) -> ApiKey:
        """The row with `revokedAt` set; again on a revoked key, the same row."""
        check_str(key_id, "key_id")
        key: ApiKey = self._http.json("DELETE", f"/v1/auth/api-keys/{segment(key_id)}")
        return key


class OrgResource:
    """`svc.org`: the org's record."""

    def __init__(self, http: Http) -> None:
        self._http = http

    def get(self) -> Org:
        org: Org = self._http.json("GET", "/v1/org")
        return org

    def update(self, name: str) -> Org:
        """Renames the org."""
        check_str(name, "name")
        org: Org = self._http.json("PATCH", "/v1/org", json={"name": name})
        return org


class Audit:
    """`svc.audit`: the org's audit log."""

    def __init__(self, http: Http) -> None:
        self._http = http

    def list(self, *, action: Optional[str] = None, limit: Optional[int] = None, offset: Optional[int] = None) -> AuditPage:
        """Newest first; `action`: only entries of it (`api_key.created`, `sandbox.deleted`...)."""
        page: AuditPage = self._http.json("GET", "/v1/audit", query={"action": action, **_page_query(limit, offset)})
        return page


class Billing:
    """`svc.billing`: spend and limits."""

    def __init__(self, http: Http) -> None:
        self._http = http

    def usage(self) -> Usage:
        """This period's spend and limits, in micros, and whether the org is blocked."""
        usage: Usage = self._http.json("GET", "/v1/billing/usage")
        return usage

    def set_limits(self, **limits: Optional[int]) -> Usage:
        """Sets (an int) or removes (None) `hard_limit_micros` and `alert_micros`; answers the usage."""
        for name, value in limits.items():
            if name not in ("hard_limit_micros", "alert_micros"):
                invalid(name, "is not a limit (hard_limit_micros, alert_micros)")
            check_int(value, name, required=False, low=0)
        usage: Usage = self._http.json("PUT", "/v1/billing/limits", json=limits)
        return usage


class Workers:
    """`svc.workers`: the platform's worker processes."""

    def __init__(self, http: Http) -> None:
        self._http = http

    def list(self) -> List[Worker]:
        """The runtime's worker processes that sent a heartbeat in the last 15 s."""
        workers: List[Worker] = self._http.json("GET", "/v1/workers")["workers"]
        return workers
