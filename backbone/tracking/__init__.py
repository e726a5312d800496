"""Tracking events: their Avro schemas, Confluent-wire-format encoding through the schema registry, and a
traffic generator (`backbone generate`). Here rather than in spark/ because the generator is a `backbone`
command and the installed package holds only `backbone*`; the Spark jobs import the schemas and the decoder
from here."""
