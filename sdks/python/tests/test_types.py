"""
The record types (svc.types, written after the contract) against the API's own OpenAPI document
(`GET /v1/openapi.json` of the real stack, generated from the schemas the server uses): every
field a TypedDict declares is a field of the answer it types, and every field the API always
sends is declared. A field renamed or dropped on either side fails here.
"""

from __future__ import annotations

import http.client
import inspect
import json
import os
import unittest
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, cast, get_type_hints

from support import client

from svc import Sandbox, Svc, types
from svc.types import SandboxRecord

#: TypedDict → (method, path, status, the array field holding it or None for the whole answer).
ANSWERS: Dict[str, Tuple[str, str, str, Optional[str]]] = {
    "SandboxRecord": ("get", "/v1/sandboxes/{id}", "200", None),
    "ExecResult": ("post", "/v1/sandboxes/{id}/exec", "200", None),
    "FileEntry": ("get", "/v1/sandboxes/{id}/files", "200", "entries"),
    "ProcessRecord": ("get", "/v1/sandboxes/{id}/processes/{pid}", "200", None),
    "SandboxStats": ("get", "/v1/sandboxes/{id}/stats", "200", None),
    "MetricSample": ("get", "/v1/sandboxes/{id}/metrics", "200", "samples"),
    "PreviewToken": ("post", "/v1/sandboxes/{id}/ports/{port}/token", "201", None),
    "Template": ("get", "/v1/templates/{id}", "200", None),
    "Volume": ("get", "/v1/volumes/{id}", "200", None),
    "App": ("get", "/v1/apps/{id}", "200", None),
    "Secret": ("get", "/v1/secrets/{id}", "200", None),
    "Webhook": ("get", "/v1/webhooks/{id}", "200", None),
    "CreatedWebhook": ("post", "/v1/webhooks", "201", None),
    "DeliveryAttempt": ("get", "/v1/webhooks/{id}/deliveries", "200", "deliveries"),
    "ApiKey": ("delete", "/v1/auth/api-keys/{key_id}", "200", None),
    "CreatedApiKey": ("post", "/v1/auth/api-keys", "201", None),
    "Org": ("get", "/v1/org", "200", None),
    "WhoAmI": ("get", "/v1/auth/me", "200", None),
    "AuditEntry": ("get", "/v1/audit", "200", "entries"),
    "Usage": ("get", "/v1/billing/usage", "200", None),
    "Worker": ("get", "/v1/workers", "200", "workers"),
    "TemplatePage": ("get", "/v1/templates", "200", None),
    "VolumePage": ("get", "/v1/volumes", "200", None),
    "AppPage": ("get", "/v1/apps", "200", None),
    "SecretPage": ("get", "/v1/secrets", "200", None),
    "WebhookPage": ("get", "/v1/webhooks", "200", None),
    "DeliveryPage": ("get", "/v1/webhooks/{id}/deliveries", "200", None),
    "KeyPage": ("get", "/v1/auth/api-keys", "200", None),
    "AuditPage": ("get", "/v1/audit", "200", None),
}


def openapi() -> Dict[str, Any]:
    client().close()  # skips without a stack
    parts = urllib.parse.urlsplit(os.environ["SVC_API_URL"])
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        conn.request("GET", parts.path.rstrip("/") + "/v1/openapi.json")
        response = conn.getresponse()
        document: Dict[str, Any] = json.loads(response.read())
        return document
    finally:
        conn.close()


class RecordTypes(unittest.TestCase):
    def test_every_typed_dict_matches_the_api_schema(self) -> None:
        document = openapi()

        def resolve(schema: Dict[str, Any]) -> Dict[str, Any]:
            ref = schema.get("$ref")
            if isinstance(ref, str):
                target: Dict[str, Any] = document
                for part in ref.lstrip("#/").split("/"):
                    target = target[part]
                return resolve(target)
            return schema

        declared_names = sorted(name for name in types.__all__ if name in ANSWERS)
        self.assertEqual(declared_names, sorted(ANSWERS), "every record type is checked")
        problems: List[str] = []
        for name, (method, path, status, field) in sorted(ANSWERS.items()):
            content = document["paths"][path][method]["responses"][status]["content"]["application/json"]
            schema = resolve(content["schema"])
            if field is not None:
                schema = resolve(schema["properties"][field]["items"])
            properties: Set[str] = set(schema["properties"])
            required: Set[str] = set(schema.get("required", []))
            declared = set(get_type_hints(getattr(types, name)))
            if declared - properties:
                problems.append(f"{name} declares {sorted(declared - properties)}, which {method.upper()} {path} does not send")
            if required - declared:
                problems.append(f"{name} lacks {sorted(required - declared)}, which {method.upper()} {path} always sends")
        self.assertEqual(problems, [])


    def test_every_keyword_of_a_request_is_a_field_of_its_body(self) -> None:
        document = openapi()
        svc = Svc("http://127.0.0.1:1", "svc_live_x")
        sandbox = Sandbox(svc._http, svc.templates, cast(SandboxRecord, {"id": "sbx_1"}))
        # The method, its body's schema, and its parameters that are not fields of the body.
        requests: List[Tuple[Callable[..., Any], str, Set[str]]] = [
            (svc.sandboxes.create, "CreateSandboxRequestEncoded", {"wait", "timeout", "idempotency_key", "params"}),
            (sandbox.exec, "ExecRequestEncoded", {"on_stdout", "on_stderr"}),
            (sandbox.processes.start, "StartProcessRequestEncoded", set()),
            (svc.templates.create, "CreateTemplateRequestEncoded", {"wait", "timeout", "params"}),
            (svc.volumes.create, "CreateVolumeRequestEncoded", {"idempotency_key"}),
            (svc.apps.create, "CreateAppRequestEncoded", {"idempotency_key"}),
            (svc.apps.update, "UpdateAppRequestEncoded", {"app_id"}),
            (svc.secrets.create, "CreateSecretRequestEncoded", {"idempotency_key"}),
            (svc.secrets.update, "PatchSecretRequestEncoded", {"secret_id"}),
            (svc.webhooks.create, "CreateWebhookRequestEncoded", {"idempotency_key"}),
            (svc.webhooks.update, "PatchWebhookRequestEncoded", {"webhook_id"}),
            (svc.keys.create, "CreateApiKeyRequestEncoded", set()),
            (svc.org.update, "UpdateOrgRequestEncoded", set()),
        ]
        problems: List[str] = []
        for method, schema_name, not_body in requests:
            schema = document["components"]["schemas"][schema_name]
            fields = set(schema["properties"])
            keywords = set(inspect.signature(method).parameters) - not_body
            if keywords - fields:
                problems.append(f"{method.__qualname__} sends {sorted(keywords - fields)}, not fields of {schema_name}")
            if set(schema.get("required", [])) - keywords:
                problems.append(f"{method.__qualname__} cannot send {sorted(set(schema['required']) - keywords)}")
        self.assertEqual(problems, [])


if __name__ == "__main__":
    unittest.main()
