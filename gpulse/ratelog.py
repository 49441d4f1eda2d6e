"""A logger that writes at most a few lines a minute, so a flood of bad input cannot fill the log."""

import logging
import time


class RateLimitedLog:
    """Log at most ``limit`` lines per ``window`` seconds; say how many were held back when the next window opens."""

    def __init__(self, logger: logging.Logger, limit: int = 10, window: float = 60.0, clock=time.monotonic):
        self.logger = logger
        self.limit = limit
        self.window = window
        self.clock = clock
        self.window_start = float("-inf")
        self.logged = 0
        self.suppressed = 0

    def log(self, level: int, message: str, *args, exc_info=False) -> None:
        now = self.clock()
        if now - self.window_start >= self.window:
            if self.suppressed:
                self.logger.log(level, "%d more like this in the last %.0f s were not logged",
                                self.suppressed, now - self.window_start)
            self.window_start, self.logged, self.suppressed = now, 0, 0
        if self.logged < self.limit:
            self.logged += 1
            self.logger.log(level, message, *args, exc_info=exc_info)
        else:
            self.suppressed += 1

    def warning(self, message: str, *args, exc_info=False) -> None:
        self.log(logging.WARNING, message, *args, exc_info=exc_info)
