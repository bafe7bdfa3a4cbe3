#!/usr/bin/env python3
# bench/notify_client.py — the client side of bench/notifications.sh (the
# receiver is bench/hooksink.c).
#
#   notify_client.py pace URL RATE SECONDS submits RATE no-op demo runs a second, evenly
#                                            spaced, for SECONDS, to URL/alerts; prints how
#                                            many were sent and the rate achieved.
#   notify_client.py post PORT SAMPLES     the baseline: SAMPLES POSTs of a webhook-sized
#                                            body to the receiver on PORT, one at a time,
#                                            over one keep-alive connection; the p50/p99 of
#                                            the round trip in ms.
#   notify_client.py stats OUT             p50/p99/max of the lateness in OUT, and the count
#                                            of distinct deliveries and of repeats.
import http.client
import json
import sys
import time


def pace(url, rate, seconds):
    host = url.split("//", 1)[1]
    conn = http.client.HTTPConnection(host, timeout=10)
    gap = 1.0 / rate
    start = time.time()
    n = 0
    while n < rate * seconds:
        due = start + n * gap
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        body = json.dumps({"alert_type": "demo", "data": {"duration_ms": 0, "steps": 0, "n": n}})
        conn.request("POST", "/alerts", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        if resp.status != 202:
            sys.exit("POST /alerts answered %d" % resp.status)
        n += 1
    took = time.time() - start
    print("submitted=%d" % n)
    print("submit_rate_per_s=%.1f" % (n / took))


def percentile(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p * (len(v) - 1))))]


def post(port, samples):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    body = json.dumps({"event": "run.succeeded", "delivery_id": "x", "run": {"id": "r"}})
    took = []
    for _ in range(samples):
        t = time.time()
        conn.request("POST", "/baseline", body, {"Content-Type": "application/json"})
        conn.getresponse().read()
        took.append((time.time() - t) * 1000.0)
    print("direct_post_p50_ms=%.2f" % percentile(took, 0.5))
    print("direct_post_p99_ms=%.2f" % percentile(took, 0.99))


def stats(out):
    late, ids = [], []
    with open(out) as f:
        for line in f:
            ms, delivery = line.split()
            late.append(float(ms))
            ids.append(delivery)
    print("deliveries=%d" % len(late))
    print("distinct_deliveries=%d" % len(set(ids)))
    print("lateness_p50_ms=%.1f" % percentile(late, 0.5))
    print("lateness_p99_ms=%.1f" % percentile(late, 0.99))
    print("lateness_max_ms=%.1f" % max(late))


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "pace" and len(sys.argv) == 5:
        pace(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
    elif cmd == "post" and len(sys.argv) == 4:
        post(int(sys.argv[2]), int(sys.argv[3]))
    elif cmd == "stats" and len(sys.argv) == 3:
        stats(sys.argv[2])
    else:
        sys.exit(__doc__ or "usage: see the comment at the top of this file")
