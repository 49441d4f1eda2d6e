"""How the pages write a length of time: in its two largest units, as 3 min 12 s or 2 d 4 h."""


def elapsed(seconds: float, *, coarse: bool = False) -> str:
    """Return ``seconds`` as 45 s, 3 min 12 s, 2 h 05 min or 3 d 4 h.

    ``coarse``, for a figure read at a glance (the usage page's idle times): whole minutes below
    the hour, hours up to two days, no zero padding: 12 min, 3 h 5 min, 30 h 0 min, 2 d 5 h.
    """
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min" if coarse else f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < (48 if coarse else 24):
        return f"{hours} h {minutes} min" if coarse else f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"
