"""The load test behind `python -m devtools.loadtest`: the real pipeline under a simulated cluster.

system.py starts Redis, the database, web, ingest and simulated collectors as
child processes; clients.py holds the websocket clients that measure what a
browser would see; meter.py follows the processes' CPU and memory; run.py
puts them together and report.py turns the measurements into the result.
With --retention, seed.py first writes rows past their retention and
pruner.py runs the retention pass on a timer beside ingest.
"""
