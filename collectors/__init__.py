"""Node collectors: read GPUs and stream version-1 samples into Redis.

This package never imports Django, so it installs lean on GPU nodes.
"""
