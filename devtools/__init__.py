"""Developer tools: the demo, the embedded Redis, the load test and the measuring scripts.

Never deployed (the Docker build context leaves this folder out) and never
imported by production code (collectors/, workers/, dashboard/, gpulse/);
tests/test_node_boundary.py checks it. These tools may import production
code, not the other way round.
"""
