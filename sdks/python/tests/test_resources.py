"""
The org's other resources through the client, on the real stack: templates, volumes, apps,
secrets, webhooks (a real delivery to a receiver here, verified with `verify_webhook`), keys, org,
audit, billing and usage, workers, whoami, health.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import io
import json
import os
import tarfile
import tempfile
import threading
import time
import unittest
from typing import Any, Dict, List

from support import client, unique

from svc import Svc, SvcError, check_webhook_signature, verify_webhook
from svc.resources import pack_context
from svc.types import DeliveryAttempt


class Resources(unittest.TestCase):
    svc: Svc

    @classmethod
    def setUpClass(cls) -> None:
        cls.svc = client()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.svc.close()

    def test_templates(self) -> None:
        name = unique("py-tpl")
        template = self.svc.templates.create(name, base="base", steps=[{"run": "echo built > /built.txt"}])
        self.assertEqual((template["name"], template["state"]), (name, "ready"))
        self.assertEqual(self.svc.templates.get(name)["id"], template["id"])
        self.assertIn(template["id"], [t["id"] for t in self.svc.templates.list(limit=500)["rows"]])
        self.assertEqual(template["pool_size"], 0)
        self.assertEqual(self.svc.templates.update(name, pool_size=1)["pool_size"], 1)
        self.assertEqual(self.svc.templates.update(template["id"], pool_size=0)["pool_size"], 0)
        with self.assertRaises(SvcError) as too_big:
            self.svc.templates.update(name, pool_size=51)
        self.assertEqual((too_big.exception.status, too_big.exception.code), (400, "invalid_request"))
        self.assertIsInstance(self.svc.templates.logs(template["id"]), str)
        self.assertEqual("".join(self.svc.templates.follow_logs(template["id"])), self.svc.templates.logs(template["id"]))
        with self.svc.sandboxes.create(unique("py-from-tpl"), template=name) as sbx:
            self.assertEqual(sbx.exec("cat /built.txt")["stdout"], "built\n")
        failing = self.svc.templates.create(unique("py-tpl-fail"), steps=[{"run": "exit 9"}], wait=False)
        self.assertEqual(failing["state"], "building")
        with self.assertRaises(SvcError) as failed:
            self.svc.templates.wait_for(failing["id"], timeout=120)
        self.assertEqual(failed.exception.code, "template_failed")
        self.svc.templates.delete(failing["id"])
        deleted = None
        for _ in range(50):  # the sandbox made from it may still be leaving (409 until then)
            try:
                deleted = self.svc.templates.delete(template["id"])
                break
            except SvcError as error:
                if error.status != 409:
                    raise
                time.sleep(0.2)
        self.assertIsNotNone(deleted)
        with self.assertRaises(SvcError) as gone:
            self.svc.templates.get(template["id"])
        self.assertEqual(gone.exception.status, 404)

    def test_templates_from_dockerfile_and_image(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            os.makedirs(os.path.join(folder, "app", "lib"))
            with open(os.path.join(folder, "app", "run.sh"), "w") as f:
                f.write("echo ran\n")
            os.chmod(os.path.join(folder, "app", "run.sh"), 0o755)
            with open(os.path.join(folder, "app", "lib", "data.txt"), "w") as f:
                f.write("nested\n")
            os.symlink("lib/data.txt", os.path.join(folder, "app", "link"))
            # What is sent: a tar.gz of the folder, names relative to it, owned by root.
            with tarfile.open(fileobj=io.BytesIO(base64.b64decode(pack_context(folder))), mode="r:gz") as packed:
                members = {m.name: m for m in packed.getmembers()}
            self.assertEqual(sorted(members), ["app", "app/lib", "app/lib/data.txt", "app/link", "app/run.sh"])
            self.assertEqual((members["app/run.sh"].mode & 0o777, members["app/run.sh"].uid), (0o755, 0))
            self.assertEqual(members["app/link"].linkname, "lib/data.txt")

            name = unique("py-dockerfile")
            dockerfile = "FROM base\nARG WHO=nobody\nCOPY app/ /srv/app/\nRUN echo \"for $WHO\" > /srv/who\n"
            template = self.svc.templates.create(name, dockerfile=dockerfile, context=folder, build_args={"WHO": "python"})
            self.assertEqual(template["state"], "ready")
            with self.svc.sandboxes.create(unique("py-from-dockerfile"), template=name) as sbx:
                seen = sbx.exec(["sh", "-c", "cat /srv/who; /srv/app/run.sh; cat /srv/app/lib/data.txt; readlink /srv/app/link"])
                self.assertEqual(seen["stdout"], "for python\nran\nnested\nlib/data.txt\n")
            with self.assertRaises(SvcError) as missing:
                self.svc.templates.create(unique("py-nocontext"), dockerfile=dockerfile, context=os.path.join(folder, "gone"))
            self.assertEqual((missing.exception.status, missing.exception.code), (0, "invalid_argument"))
        # An image reference is sent as such: this one's registry is not public, so the build says so.
        with self.assertRaises(SvcError) as refused:
            self.svc.templates.create(unique("py-image"), image="10.20.30.40:5000/team/app:1", timeout=120)
        self.assertEqual(refused.exception.code, "template_failed")
        self.assertIn("the registry host 10.20.30.40 is not a public address", refused.exception.message)

    def test_volumes(self) -> None:
        key = unique("py-idem-volume")
        volume = self.svc.volumes.create(1, name=unique("py-vol"), idempotency_key=key)
        self.assertEqual(self.svc.volumes.create(1, name=volume["name"], idempotency_key=key)["id"], volume["id"])
        self.assertEqual(self.svc.volumes.get(volume["id"])["size_gb"], 1)
        self.assertIn(volume["id"], [v["id"] for v in self.svc.volumes.list(limit=500)["volumes"]])
        self.assertEqual(self.svc.volumes.delete(volume["id"])["id"], volume["id"])

    def test_apps(self) -> None:
        app = self.svc.apps.create(unique("py-app"), template="base", cmd=["sleep", "600"], replicas=1)
        try:
            self.assertEqual(self.svc.apps.get(app["id"])["name"], app["name"])
            self.assertIn(app["id"], [a["id"] for a in self.svc.apps.list()["apps"]])
            running = self.svc.apps.wait_until_running(app["id"], timeout=120)
            self.assertEqual((running["state"], running["ready_replicas"], len(running["sandbox_ids"])), ("running", 1, 1))
            self.assertEqual(self.svc.apps.update(app["id"], env={"A": "1"})["id"], app["id"])
            self.assertEqual(self.svc.apps.scale(app["id"], 0)["replicas"], 0)
        finally:
            self.svc.apps.delete(app["id"])

    def test_secrets_never_show_the_value(self) -> None:
        value = "sk-python-test-value-0123456789"
        secret = self.svc.secrets.create(unique("py-secret"), value, allowed_hosts=["api.example.com"])
        self.assertEqual(self.svc.secrets.get(secret["id"])["allowed_hosts"], ["api.example.com"])
        self.assertIn(secret["id"], [s["id"] for s in self.svc.secrets.list()["secrets"]])
        self.assertIsNotNone(self.svc.secrets.rotate(secret["id"], value + "-rotated")["rotatedAt"])
        updated = self.svc.secrets.update(secret["id"], header_name="X-Api-Key", header_format="{value}")
        self.assertEqual(updated["header_name"], "X-Api-Key")
        self.assertEqual(self.svc.secrets.delete(secret["id"])["id"], secret["id"])
        # Neither the records nor an error about them carry the value.
        with self.assertRaises(SvcError) as bad:
            self.svc.secrets.create("", value, allowed_hosts=["api.example.com"])
        for text in (json.dumps(secret), json.dumps(updated), str(bad.exception), repr(bad.exception.details)):
            self.assertNotIn(value, text)

    def test_webhooks_real_delivery_verified(self) -> None:
        received: List[Dict[str, Any]] = []
        got = threading.Event()

        class Receiver(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                received.append({"body": body, "signature": self.headers.get("x-svc-signature")})
                self.send_response(204)
                self.end_headers()
                got.set()

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"

        created = self.svc.webhooks.create(url, events=["sandbox.created"])
        secret = created["secret_returned_once"]
        self.assertTrue(secret.startswith("whsec_"))
        webhook_id = created["id"]
        self.assertEqual(self.svc.webhooks.get(webhook_id)["url"], url)
        self.assertIn(webhook_id, [w["id"] for w in self.svc.webhooks.list()["webhooks"]])
        self.assertEqual(self.svc.webhooks.update(webhook_id, events=["sandbox.created", "sandbox.deleted"])["events"], ["sandbox.created", "sandbox.deleted"])

        delivery = self.svc.webhooks.test(webhook_id)
        self.assertTrue(got.wait(60), "the ping was not delivered")
        ping = received[0]
        self.assertEqual(json.loads(ping["body"])["event"], "ping")
        self.assertTrue(self.svc.verify_webhook(secret, ping["body"], ping["signature"]))
        self.assertTrue(verify_webhook(secret, ping["body"].decode(), [ping["signature"]]))
        self.assertFalse(verify_webhook(secret, ping["body"] + b" ", ping["signature"]))
        self.assertEqual(check_webhook_signature("whsec_other", ping["body"], ping["signature"]), "signature_mismatch")

        deliveries: List[DeliveryAttempt] = []
        for _ in range(100):
            deliveries = list(self.svc.webhooks.deliveries(webhook_id)["deliveries"])
            if any(d["delivery_id"] == delivery["delivery_id"] and d["status"] == "succeeded" for d in deliveries):
                break
            time.sleep(0.1)
        self.assertIn(delivery["delivery_id"], [d["delivery_id"] for d in deliveries if d["status"] == "succeeded"])
        with self.assertRaises(SvcError) as not_retryable:
            self.svc.webhooks.retry(webhook_id, delivery["delivery_id"])
        self.assertEqual((not_retryable.exception.status, not_retryable.exception.code), (409, "delivery_not_retryable"))
        self.svc.webhooks.delete(webhook_id)
        with self.assertRaises(SvcError) as gone:
            self.svc.webhooks.get(webhook_id)
        self.assertEqual(gone.exception.status, 404)

    def test_verify_webhook_vectors(self) -> None:
        # RFC 4231 test case 2, as @svc/sdk's tests use it.
        vector = "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        self.assertTrue(verify_webhook("Jefe", "what do ya want for nothing?", vector))
        self.assertTrue(verify_webhook("Jefe", b"what do ya want for nothing?", vector.upper().replace("SHA256=", "sha256=")))
        body = json.dumps({"event": "sandbox.created", "data": {"note": "Zoë 😀"}}).encode()
        good = "sha256=" + hmac.new(b"whsec_x", body, hashlib.sha256).hexdigest()
        self.assertIsNone(check_webhook_signature("whsec_x", body, good))
        cases = [
            ("", body, good, "missing_secret"),
            ("whsec_x", {"parsed": "json"}, good, "invalid_body"),
            ("whsec_x", body, None, "missing_signature"),
            ("whsec_x", body, [good, good], "missing_signature"),
            ("whsec_x", body, good[7:], "malformed_signature"),
            ("whsec_x", body, "SHA256=" + good[7:], "malformed_signature"),
            ("whsec_x", body, good + "00", "malformed_signature"),
            ("whsec_x", body, "sha256=" + "z" * 64, "malformed_signature"),
            ("whsec_y", body, good, "signature_mismatch"),
        ]
        for secret, raw, signature, reason in cases:
            self.assertEqual(check_webhook_signature(secret, raw, signature), reason)  # type: ignore[arg-type]
            self.assertFalse(Svc.verify_webhook(secret, raw, signature))  # type: ignore[arg-type]

    def test_account(self) -> None:
        me = self.svc.whoami()
        self.assertTrue(me["org"]["id"].startswith("org_"))
        self.assertEqual(me["credential"]["type"], "api_key")
        self.assertEqual(self.svc.health()["status"], "ok")
        org = self.svc.org.get()
        self.assertEqual(org["id"], me["org"]["id"])
        renamed = self.svc.org.update(org["name"] + " (python)")
        self.assertEqual(renamed["name"], org["name"] + " (python)")
        self.svc.org.update(org["name"])
        entries = self.svc.audit.list(action="org.updated", limit=10)["entries"]
        self.assertTrue(all(e["action"] == "org.updated" for e in entries))
        self.assertGreaterEqual(len(entries), 1)
        usage = self.svc.usage()
        self.assertIsInstance(usage["spend_micros"], int)
        self.assertEqual(self.svc.billing.usage()["period_start"], usage["period_start"])
        limited = self.svc.billing.set_limits(hard_limit_micros=10**12, alert_micros=None)
        self.assertEqual((limited["hard_limit_micros"], limited["alert_micros"]), (10**12, None))
        self.assertIsNone(self.svc.billing.set_limits(hard_limit_micros=None)["hard_limit_micros"])
        self.assertIsInstance(self.svc.workers.list(), list)


if __name__ == "__main__":
    unittest.main()
