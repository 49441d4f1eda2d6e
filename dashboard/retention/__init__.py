"""History retention: hourly rollups computed from the minute ones, and rows past their retention deleted
(docs/retention.md). Run by each control worker as a periodic pass (runner.py); no app imports this one."""
