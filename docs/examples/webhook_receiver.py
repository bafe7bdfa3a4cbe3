#!/usr/bin/env python3
"""A receiver of opsrun's webhook notifications (docs/notifications.md).

It checks Opsrun-Signature with the secret in OPSRUN_HOOK_SECRET, refuses a
timestamp more than five minutes off (401), acknowledges a delivery it has
already handled without handling it again (opsrun delivers at least once),
and prints one line per event. Python 3 standard library only. It listens
on 127.0.0.1:PORT (8099 by default): put a TLS proxy in front of it to take
notifications from another machine.

    OPSRUN_HOOK_SECRET=... python3 webhook_receiver.py [PORT]
"""
import hashlib, hmac, json, os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer

SECRET = os.environ["OPSRUN_HOOK_SECRET"].encode()
seen = set()  # delivery ids handled; a real receiver keeps them in its database


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:  # Opsrun-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">
            sig = dict(p.split("=", 1) for p in self.headers["Opsrun-Signature"].split(","))
            t = int(sig["t"])
        except (AttributeError, KeyError, ValueError):
            return self.answer(401)
        mac = hmac.new(SECRET, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac.encode(), sig.get("v1", "").encode()):
            return self.answer(401)
        if abs(time.time() - t) > 300:  # a replay of an old request
            return self.answer(401)
        delivery = self.headers["Opsrun-Delivery"]
        if delivery not in seen:
            seen.add(delivery)
            run = json.loads(body)["run"]
            print(self.headers["Opsrun-Event"], run["id"], run["outcome"], delivery, flush=True)
        self.answer(204)

    def answer(self, status):
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args):  # no access log on stderr
        pass


HTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8099), Hook).serve_forever()
