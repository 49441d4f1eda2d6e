"""The contract every part of gpulse shares: collectors, workers and the dashboard.

Redis keys (keys.py), the version-1 sample (schema.py), node status (status.py)
and clock throttle reasons (throttle.py). Nothing here imports Django or torch,
so GPU nodes install it lean; nothing here is a tool (those are in devtools/).
"""
