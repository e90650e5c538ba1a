"""
`svc`: the Python client of the svc sandbox platform (`pip install svc-sdk`).

    from svc import Svc

    svc = Svc()                                   # SVC_API_URL, SVC_API_KEY
    with svc.sandboxes.create(name="demo") as sbx:  # returns once running; deleted at the end
        print(sbx.exec("echo hello")["stdout"])

`AsyncSvc` (from `svc.aio`, also here) has the same methods for asyncio.
"""

from ._http import DEFAULT_API_URL, SvcError
from .aio import AsyncSvc
from .client import Svc
from .contexts import CodeContext, Contexts
from .events import EventStream, SvcEvent
from .processes import OutputChunk, Process, ProcessLogs, Processes
from .sandboxes import Files, Sandbox, SandboxPage, Sandboxes
from .terminal import Terminal
from .webhooks import (
    WEBHOOK_DELIVERY_ID_HEADER,
    WEBHOOK_EVENT_HEADER,
    WEBHOOK_ID_HEADER,
    WEBHOOK_SIGNATURE_HEADER,
    check_webhook_signature,
    verify_webhook,
)

__version__ = "0.1.0"

__all__ = [
    "CodeContext",
    "Contexts",
    "DEFAULT_API_URL",
    "AsyncSvc",
    "EventStream",
    "Files",
    "OutputChunk",
    "Process",
    "ProcessLogs",
    "Processes",
    "Sandbox",
    "SandboxPage",
    "Sandboxes",
    "Svc",
    "SvcError",
    "SvcEvent",
    "Terminal",
    "WEBHOOK_DELIVERY_ID_HEADER",
    "WEBHOOK_EVENT_HEADER",
    "WEBHOOK_ID_HEADER",
    "WEBHOOK_SIGNATURE_HEADER",
    "check_webhook_signature",
    "verify_webhook",
]
