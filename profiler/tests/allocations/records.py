"""Dict- and JSON-heavy work for the allocation profiler's test: records built as dicts,
round-tripped through json, a slice of each round kept to the end."""
import json


def make_records(n):
    return [
        {"id": i, "name": "item%d" % i, "tags": ["a" * 20, "b" * 30], "values": list(range(20))}
        for i in range(n)
    ]


def round_trip(records):
    return json.loads(json.dumps(records))


def main():
    kept = []
    for _ in range(12):
        back = round_trip(make_records(20000))
        kept.append(back[:2000])
    print("records kept", sum(len(k) for k in kept))


main()
