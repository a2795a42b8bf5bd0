"""The seeds' update_counter and get_counter (Redis in Action §5.2), as the
reference hitcount is checked against. Transcribed from the original
documents with their bugs fixed (redis-py 3+ zadd mapping, dict.items).

Usage: seeds.py HITCOUNT_URL REFERENCE_URL HITS_JSON
Replays every hit of HITS_JSON ([[name, count, ts], ...]) with update_counter
into REFERENCE_URL (an empty database), then reads every counter with
get_counter from both and prints "ok <counters compared>" when they match,
else the first difference, and exits 1.
"""
import json
import sys

import redis

PRECISION = [1, 5, 60, 300, 3600, 18000, 86400]


def update_counter(conn, name, count=1, now=None):
    pipe = conn.pipeline()
    for prec in PRECISION:
        pnow = int(now / prec) * prec
        hash = '%s:%s' % (prec, name)
        pipe.zadd('known:', {hash: 0})
        pipe.hincrby('count:' + hash, pnow, count)
    pipe.execute()


def get_counter(conn, name, precision):
    hash = '%s:%s' % (precision, name)
    data = conn.hgetall('count:' + hash)
    to_return = []
    for key, value in data.items():
        to_return.append((int(key), int(value)))
    to_return.sort()
    return to_return


def main():
    ours = redis.Redis.from_url(sys.argv[1])
    ref = redis.Redis.from_url(sys.argv[2])
    with open(sys.argv[3]) as f:
        hits = json.load(f)
    for name, count, ts in hits:
        update_counter(ref, name, count, ts)
    names = sorted({h[0] for h in hits})
    compared = 0
    for name in names:
        for prec in PRECISION:
            a, b = get_counter(ours, name, prec), get_counter(ref, name, prec)
            if a != b:
                print('mismatch %s at %s: hitcount %s, seeds %s' % (name, prec, a, b))
                sys.exit(1)
            compared += 1
    known_ours = sorted(ours.zrange('known:', 0, -1))
    known_ref = sorted(ref.zrange('known:', 0, -1))
    if known_ours != known_ref:
        print('known: differs: %s vs %s' % (known_ours[:5], known_ref[:5]))
        sys.exit(1)
    print('ok %d' % compared)


if __name__ == '__main__':
    main()
