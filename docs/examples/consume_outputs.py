"""Prints every launch lhc's nodes refused, read from the output topic (docs/kafka.md).

Usage: python3 consume_outputs.py BROKERS [TOPIC]

Each message's key is the connector that published it; its value is one JSON object of
schemas/published-output.schema.json. Reads the topic from its start and stops after 5 s
without a new message (a live consumer would keep polling).
"""
import json
import sys

from confluent_kafka import Consumer

BROKERS = sys.argv[1]
TOPIC = sys.argv[2] if len(sys.argv) > 2 else "lhc.outputs"

consumer = Consumer({"bootstrap.servers": BROKERS, "group.id": "lhc-outputs-example",
                     "auto.offset.reset": "earliest"})
consumer.subscribe([TOPIC])
while (message := consumer.poll(5.0)) is not None:
    if message.error():
        sys.exit(f"kafka: {message.error()}")
    output = json.loads(message.value())["output"]
    if output["type"] == "launch.decision" and output["outcome"] == "rejected":
        print(message.key().decode(), output["ts"], output["request"], output.get("reason"))
consumer.close()
