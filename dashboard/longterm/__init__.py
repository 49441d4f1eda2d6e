"""Long-term storage past one database (docs/long-term-storage.md): ingest sends the per-GPU series to a
Prometheus remote-write store (stage.py, writer.py, encoding.py), and the node history reads ranges older than
the local retention back from that store's PromQL API (reading.py). Nothing imports this app: ingest finds the
stage and the node history finds the reader by dotted path in settings."""
