"""Small helpers shared by the collector, the workers and the web side.

Nothing here imports Django or torch, so GPU nodes install it lean.
"""
