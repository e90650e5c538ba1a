"""
The JSON of the API's records, as TypedDicts (the contract, /v1: docs/api.md): what the calls
return, exactly as the API sent it. Timestamps are ISO 8601 strings; ids are strings. Fields the
API may add later are kept in the dicts too.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, TypedDict

__all__ = [
    "ApiKey", "App", "AppPage", "AuditEntry", "AuditPage", "CreatedApiKey", "CreatedWebhook",
    "DeliveryAttempt", "DeliveryPage", "ExecResult", "FileEntry", "FileInfo", "KeyPage", "Org", "PreviewToken",
    "MetricSample", "ProcessRecord", "SandboxRecord", "SandboxStats", "Secret", "SecretPage", "Template",
    "TemplatePage", "Usage", "Volume", "VolumePage", "Webhook", "WebhookPage", "WhoAmI", "Worker",
]


class SandboxRecord(TypedDict):
    id: str
    name: str
    orgId: str
    templateId: str
    hostId: Optional[str]
    parentId: Optional[str]
    #: pending, starting, running, stopping, stopped, deleting, deleted, error
    state: str
    type: str
    region: str
    datacenter: Optional[str]
    agent_ready: bool
    runtime_ready: bool
    runtime_reason: Optional[str]
    cpu: int
    ramMb: int
    diskGb: int
    vsockCid: Optional[int]
    internalIp: Optional[str]
    exposedPorts: List[int]
    volume_attachments: List[Dict[str, Any]]
    metadata: Dict[str, Any]
    errorMessage: Optional[str]
    network: Dict[str, List[str]]
    secrets: List[str]
    createdAt: str
    startedAt: Optional[str]
    stoppedAt: Optional[str]
    deletedAt: Optional[str]
    timeout_s: Optional[int]
    idle_timeout_s: Optional[int]
    #: stop, delete
    on_timeout: str
    auto_delete_s: Optional[int]
    auto_resume: bool
    expiresAt: Optional[str]
    lastActivityAt: Optional[str]
    #: user, timeout, idle, oom, host_lost, usage_limit, error; None while running
    stop_reason: Optional[str]


class ExecResult(TypedDict):
    exit_code: int
    stdout: str
    stderr: str
    duration_ms: int
    #: The host kept at most 1 MiB of each output and cut it there (never when streamed).
    truncated: bool


class FileEntry(TypedDict):
    name: str
    #: file, dir, symlink, other
    type: str
    size: int
    mtime: str


class FileInfo(TypedDict):
    """An entry as `files.stat` shows it (a final symlink not followed)."""

    name: str
    path: str
    #: file, dir, symlink, other
    type: str
    size: int
    #: The permission bits in octal: "0644".
    mode: str
    uid: int
    gid: int
    mtime: str
    #: A symlink's target as written, else None.
    target: Optional[str]


class ProcessRecord(TypedDict):
    pid: int
    cmd: List[str]
    #: running, exited
    state: str
    exit_code: Optional[int]
    startedAt: str
    exitedAt: Optional[str]
    #: exited, killed, sandbox_stopped (None while running)
    reason: Optional[str]


class MetricSample(TypedDict):
    """One sample of `sandbox.metrics()` (every 5 s while it runs, kept 24 h)."""

    ts: str
    #: CPU time since the previous sample over the time between them, in percent of one core.
    cpu_pct: float
    mem_bytes: int
    mem_limit_bytes: int
    disk_bytes: int
    disk_limit_bytes: int
    pids: int
    net_rx_bytes: int
    net_tx_bytes: int


class SandboxStats(TypedDict):
    cpu_usage_ns: Optional[int]
    memory_bytes: int
    pids: int
    net_bytes_in: Optional[int]
    net_bytes_out: Optional[int]


class PreviewToken(TypedDict):
    url: str
    token: str
    expiresAt: str


class Template(TypedDict):
    id: str
    name: str
    #: building, ready, failed
    state: str
    image: Optional[str]
    base: Optional[str]
    start_cmd: Optional[str]
    ready_cmd: Optional[str]
    errorMessage: Optional[str]
    createdAt: str
    builtAt: Optional[str]
    #: sandboxes kept booted and handed out on create (0: none)
    pool_size: int
    #: the OCI image reference it was made from (`image`, a Dockerfile's FROM), in full
    image_ref: Optional[str]
    #: the manifest digest pulled for it, once ready
    image_digest: Optional[str]


class Volume(TypedDict):
    id: str
    name: str
    #: local, shared
    type: str
    driver: str
    size_gb: int
    state: str
    mount_path: Optional[str]
    host_id: Optional[str]
    attachment_id: Optional[str]
    attached_to: Optional[str]
    device_path: Optional[str]
    attachments: List[Dict[str, Any]]
    auto_attach: Dict[str, Any]
    createdAt: str
    deletedAt: Optional[str]


class App(TypedDict):
    id: str
    name: str
    template: str
    cmd: List[str]
    replicas: int
    ready_replicas: int
    exposed_ports: List[int]
    revision: int
    #: deploying, running, degraded, deleting
    state: str
    #: Why it is not running, else None.
    reason: Optional[str]
    sandbox_ids: List[str]
    createdAt: str
    updatedAt: str


class Secret(TypedDict):
    id: str
    name: str
    allowed_hosts: List[str]
    header_name: str
    header_format: str
    createdAt: str
    rotatedAt: Optional[str]


class Webhook(TypedDict):
    id: str
    url: str
    events: List[str]
    enabled: bool
    createdAt: str
    updatedAt: str


class CreatedWebhook(Webhook):
    #: The signing secret, shown this once (`verify_webhook`).
    secret_returned_once: str


class DeliveryAttempt(TypedDict):
    id: str
    delivery_id: str
    event: str
    attempt: int
    #: pending, succeeded, failed, dead_letter, retried
    status: str
    response_code: Optional[int]
    error: Optional[str]
    duration_ms: Optional[int]
    createdAt: str
    next_attempt_at: Optional[str]


class ApiKey(TypedDict):
    id: str
    prefix: str
    name: str
    scopes: List[str]
    createdAt: str
    lastUsedAt: Optional[str]
    expiresAt: Optional[str]
    revokedAt: Optional[str]


class CreatedApiKey(ApiKey):
    #: The key itself, shown this once.
    token: str


class Org(TypedDict):
    id: str
    name: str
    createdAt: str


class WhoAmI(TypedDict):
    org: Dict[str, Any]
    user: Optional[Dict[str, Any]]
    credential: Dict[str, Any]


class AuditEntry(TypedDict):
    id: str
    action: str
    actor: Dict[str, Any]
    target_id: Optional[str]
    ip: Optional[str]
    user_agent: Optional[str]
    createdAt: str


class Usage(TypedDict):
    period_start: str
    period_end: str
    spend_micros: int
    hard_limit_micros: Optional[int]
    alert_micros: Optional[int]
    blocked: bool


class Worker(TypedDict):
    name: str
    script_name: str
    version: str
    prefix: str
    cells: Optional[Any]


class _Page(TypedDict):
    total: int
    offset: int
    limit: int
    has_more: bool


class TemplatePage(_Page):
    rows: List[Template]


class VolumePage(_Page):
    volumes: List[Volume]


class AppPage(_Page):
    apps: List[App]


class SecretPage(_Page):
    secrets: List[Secret]


class WebhookPage(_Page):
    webhooks: List[Webhook]


class DeliveryPage(_Page):
    deliveries: List[DeliveryAttempt]


class KeyPage(_Page):
    keys: List[ApiKey]


class AuditPage(_Page):
    entries: List[AuditEntry]


class FileWatchEvent(TypedDict, total=False):
    """One change of `files.watch`: `type` create, modify, delete, move (`from`: its old path) or overflow (the last)."""

    type: str
    path: str
    is_dir: bool
    # `from` is a keyword in Python: read it as event["from"].
