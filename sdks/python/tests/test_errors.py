"""
Every error path: the API's own refusals (404, 401, 403, 400 with its issues) from the real stack,
what is refused before sending, an answer that is not JSON, 429/503 retried after Retry-After,
timeouts, kept-alive connections, and the key never shown.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time
import unittest
from typing import Callable, List

from support import StandIn, client, json_reply, unique

from svc import Svc, SvcError

MISSING_SANDBOX = "sbx_" + "0" * 26


class ApiRefusals(unittest.TestCase):
    """The real API's errors, surfaced unchanged as SvcError(status, code, message, details)."""

    svc: Svc

    @classmethod
    def setUpClass(cls) -> None:
        cls.svc = client()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.svc.close()

    def test_404_not_found(self) -> None:
        with self.assertRaises(SvcError) as caught:
            self.svc.sandboxes.get(MISSING_SANDBOX)
        self.assertEqual((caught.exception.status, caught.exception.code), (404, "not_found"))
        self.assertIsInstance(caught.exception.message, str)

    def test_401_bad_key(self) -> None:
        bad = Svc(api_key="svc_live_not_a_key_at_all")
        self.addCleanup(bad.close)
        with self.assertRaises(SvcError) as caught:
            bad.sandboxes.list()
        self.assertEqual((caught.exception.status, caught.exception.code), (401, "unauthenticated"))
        # The key is in no message, repr or detail of the error or the client.
        for text in (str(caught.exception), repr(caught.exception), repr(caught.exception.details), repr(bad)):
            self.assertNotIn("not_a_key_at_all", text)

    def test_403_insufficient_scope_and_401_once_revoked(self) -> None:
        created = self.svc.keys.create(unique("py-read-only"), scopes=["sandboxes:read"])
        self.assertTrue(created["token"].startswith("svc_live_"))
        self.assertEqual(created["scopes"], ["sandboxes:read"])
        scoped = Svc(api_key=created["token"])
        self.addCleanup(scoped.close)
        self.assertIsInstance(scoped.sandboxes.list()["rows"], list)  # what it may do
        with self.assertRaises(SvcError) as caught:
            scoped.sandboxes.create(name=unique("py-refused"))
        self.assertEqual((caught.exception.status, caught.exception.code), (403, "insufficient_scope"))
        self.assertEqual(caught.exception.details["required_scope"], "sandboxes:write")
        with self.assertRaises(SvcError) as account:
            scoped.keys.list()
        self.assertEqual((account.exception.status, account.exception.code), (403, "full_access_required"))
        self.assertEqual(scoped.whoami()["credential"]["scopes"], ["sandboxes:read"])

        listed = self.svc.keys.list(limit=500)
        self.assertIn(created["id"], [k["id"] for k in listed["keys"]])
        self.assertNotIn("token", listed["keys"][0])
        revoked = self.svc.keys.revoke(created["id"])
        self.assertIsNotNone(revoked["revokedAt"])
        with self.assertRaises(SvcError) as after:
            scoped.sandboxes.list()
        self.assertEqual((after.exception.status, after.exception.code), (401, "unauthenticated"))

    def test_400_invalid_body_with_every_issue(self) -> None:
        with self.assertRaises(SvcError) as caught:
            self.svc.sandboxes.create(cpu=999, ram_mb=1, wait=False)
        error = caught.exception
        self.assertEqual((error.status, error.code), (400, "invalid_request"))
        self.assertTrue({"cpu", "ram_mb"} <= {issue["path"] for issue in error.issues}, error.issues)

    def test_400_bad_event_filter(self) -> None:
        with self.assertRaises(SvcError) as caught:
            self.svc.events(["sandbox.*"])
        self.assertEqual((caught.exception.status, caught.exception.code), (400, "invalid_event_filter"))

    def test_non_json_answer_of_the_real_server(self) -> None:
        # A base URL that misses the API (a path of the server's dashboard): its HTML page, 200.
        wrong = Svc(os.environ["SVC_API_URL"] + "/not-the-api")
        self.addCleanup(wrong.close)
        with self.assertRaises(SvcError) as caught:
            wrong.org.get()
        self.assertEqual((caught.exception.status, caught.exception.code), (200, "unexpected_response"))
        self.assertIn("text/html", caught.exception.message)
        self.assertEqual(caught.exception.details["content_type"].split(";")[0], "text/html")

    def test_refused_before_sending(self) -> None:
        # A client pointed at a stand-in: nothing of these reaches it.
        stand_in = StandIn(lambda method, path: json_reply(200, b"{}"))
        try:
            svc = stand_in.client()
            sandbox_calls: List[Callable[[], object]] = [
                lambda: svc.sandboxes.create(cpu="2"),  # type: ignore[arg-type]
                lambda: svc.sandboxes.create(env={"A": 1}),  # type: ignore[dict-item]
                lambda: svc.sandboxes.create(cpu=True),
                lambda: svc.sandboxes.get(""),
                lambda: svc.volumes.create(size_gb=1.5),  # type: ignore[arg-type]
                lambda: svc.secrets.create("name", None, allowed_hosts=["example.com"]),  # type: ignore[arg-type]
                lambda: svc.secrets.create("name", "v", allowed_hosts="example.com"),
                lambda: svc.keys.create(""),
                lambda: svc.apps.create("a", template="base", cmd="sleep 1"),
                lambda: svc.webhooks.create(42),  # type: ignore[arg-type]
                lambda: svc.templates.create("t", steps="run: x"),  # type: ignore[arg-type]
                lambda: svc.billing.set_limits(hard_limit=1),
                lambda: svc.events([1]),  # type: ignore[list-item]
                lambda: svc.sandboxes.create(metadata={"x": float("nan")}),
                lambda: Svc(stand_in.url, "svc_live_x", timeout=0),
            ]
            for call in sandbox_calls:
                with self.assertRaises(SvcError) as caught:
                    call()
                self.assertEqual((caught.exception.status, caught.exception.code), (0, "invalid_argument"))
                self.assertTrue(caught.exception.issues)
            self.assertEqual(stand_in.requests, [])
        finally:
            stand_in.close()

    def test_missing_key(self) -> None:
        saved = os.environ.pop("SVC_API_KEY", None)
        try:
            with self.assertRaises(SvcError) as caught:
                Svc()
            self.assertEqual(caught.exception.code, "missing_api_key")
        finally:
            if saved is not None:
                os.environ["SVC_API_KEY"] = saved


class Transport(unittest.TestCase):
    """What may sit between the client and the API, played by a stand-in server on loopback."""

    def test_html_error_page_is_a_clear_svc_error(self) -> None:
        page = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
        stand_in = StandIn(lambda method, path: (502, [("Content-Type", "text/html")], page))
        try:
            with self.assertRaises(SvcError) as caught:
                stand_in.client(max_retries=0).sandboxes.list()
            self.assertEqual((caught.exception.status, caught.exception.code), (502, "http_502"))
            self.assertIn("502 Bad Gateway", caught.exception.message)
            self.assertIn("not the API's JSON", caught.exception.message)
        finally:
            stand_in.close()

    def test_2xx_that_is_not_json_is_unexpected_response(self) -> None:
        stand_in = StandIn(lambda method, path: (200, [("Content-Type", "text/plain")], b"hello, not json"))
        try:
            with self.assertRaises(SvcError) as caught:
                stand_in.client().org.get()
            self.assertEqual((caught.exception.status, caught.exception.code), (200, "unexpected_response"))
            self.assertIn("hello, not json", caught.exception.message)
        finally:
            stand_in.close()

    def test_429_and_503_are_retried_after_retry_after(self) -> None:
        answers = [
            json_reply(429, b'{"error":"slow down","code":"rate_limited"}', [("Retry-After", "0")]),
            json_reply(503, b'{"error":"db down","code":"unavailable"}', [("Retry-After", "0.1")]),
            json_reply(200, b'{"id":"org_1","name":"n","createdAt":"2026-01-01T00:00:00.000Z"}'),
        ]
        stand_in = StandIn(lambda method, path: answers.pop(0))
        try:
            org = stand_in.client().org.get()
            self.assertEqual(org["id"], "org_1")
            self.assertEqual(len(stand_in.requests), 3)
        finally:
            stand_in.close()

    def test_a_create_refused_for_capacity_is_sent_again_after_retry_after(self) -> None:
        record = b'{"id":"sbx_1","name":"n","state":"pending"}'
        answers = [
            json_reply(503, b'{"error":"no live host has room","code":"no_capacity","retry_after_s":0}', [("Retry-After", "0")]),
            json_reply(201, record),
        ]
        stand_in = StandIn(lambda method, path: answers.pop(0))
        try:
            created = stand_in.client().sandboxes.create("n", wait=False)
            self.assertEqual(created.id, "sbx_1")
            self.assertEqual([(m, p) for m, p, _ in stand_in.requests], [("POST", "/v1/sandboxes")] * 2)
        finally:
            stand_in.close()

    def test_retries_are_bounded_then_the_error_is_raised(self) -> None:
        stand_in = StandIn(lambda m, p: json_reply(429, b'{"error":"slow down","code":"rate_limited"}', [("Retry-After", "0")]))
        try:
            with self.assertRaises(SvcError) as caught:
                stand_in.client(max_retries=2).org.get()
            self.assertEqual((caught.exception.status, caught.exception.code), (429, "rate_limited"))
            self.assertEqual(len(stand_in.requests), 3)
            # A Retry-After longer than the client will wait: raised at once, not slept through.
            stand_in.requests.clear()
            long_wait = StandIn(lambda m, p: json_reply(503, b'{"error":"later","code":"unavailable"}', [("Retry-After", "3600")]))
            try:
                with self.assertRaises(SvcError) as later:
                    long_wait.client(max_retry_wait=5).org.get()
                self.assertEqual(later.exception.status, 503)
                self.assertEqual(len(long_wait.requests), 1)
            finally:
                long_wait.close()
        finally:
            stand_in.close()

    def test_events_reconnect_after_the_last_event_seen(self) -> None:
        def events(method: str, path: str) -> tuple[int, list[tuple[str, str]], bytes]:
            n = len(stand_in.requests)
            envelope = json.dumps({"event": "sandbox.created", "org_id": "org_1", "ts": "t", "data": {"n": n}})
            # Each answer ends after one event: the stream was cut, as a proxy's idle timeout cuts it.
            return 200, [("Content-Type", "text/event-stream")], f": keep-alive\n\nid: {n}\ndata: {envelope}\n\n".encode()

        stand_in = StandIn(events)
        try:
            with stand_in.client().events(["sandbox.created"]) as stream:
                first, second, third = next(stream), next(stream), next(stream)
            self.assertEqual([first.id, second.id, third.id], ["1", "2", "3"])
            self.assertEqual(third.data, {"n": 3})
            self.assertEqual(stream.last_event_id, "3")
            self.assertEqual([p for _, p, _ in stand_in.requests][0], "/v1/events?events=sandbox.created")
            self.assertNotIn("last-event-id", stand_in.headers[0])
            self.assertEqual([h["last-event-id"] for h in stand_in.headers[1:3]], ["1", "2"])
        finally:
            stand_in.close()

    def test_timeout(self) -> None:
        release = threading.Event()

        def slow(method: str, path: str) -> tuple[int, list[tuple[str, str]], bytes]:
            release.wait(10)
            return json_reply(200, b"{}")

        stand_in = StandIn(slow)
        try:
            with self.assertRaises(SvcError) as caught:
                stand_in.client(timeout=0.3).org.get()
            self.assertEqual((caught.exception.status, caught.exception.code), (0, "timeout"))
        finally:
            release.set()
            stand_in.close()

    def test_unreachable(self) -> None:
        with self.assertRaises(SvcError) as caught:
            Svc("http://127.0.0.1:1", "svc_live_x").org.get()
        self.assertEqual((caught.exception.status, caught.exception.code), (0, "network_error"))

    def test_keep_alive_one_connection_per_thread(self) -> None:
        stand_in = StandIn(lambda m, p: json_reply(200, b'{"status":"ok"}'))
        try:
            svc = stand_in.client()
            for _ in range(5):
                svc.health()
            self.assertEqual(stand_in.connections(), 1)
            # Another thread: its own connection, kept alive as well.
            threads = [threading.Thread(target=lambda: [svc.health() for _ in range(3)]) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(len(stand_in.requests), 11)
            self.assertEqual(stand_in.connections(), 3)
            self.assertEqual(stand_in.headers[0]["authorization"], "Bearer svc_live_secret_value")
            # The finished threads' connections were closed and went with them; `close()` closes the one left.
            del threads, t
            gc.collect()
            self.assertEqual(len(svc._http._connections), 1)
            svc.close()
            self.assertEqual(sum(1 for c in svc._http._connections if c.sock is not None), 0)
        finally:
            stand_in.close()

    def test_a_connection_the_server_closed_is_replaced(self) -> None:
        stand_in = StandIn(lambda m, p: json_reply(200, b'{"status":"ok"}', [("Connection", "close")]))
        try:
            svc = stand_in.client()
            svc.health()
            time.sleep(0.05)
            svc.health()
            self.assertEqual((len(stand_in.requests), stand_in.connections()), (2, 2))
        finally:
            stand_in.close()


if __name__ == "__main__":
    unittest.main()
