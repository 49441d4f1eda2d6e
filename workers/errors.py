"""An exception as the one line a person reads as a job's reason."""

LINE_CHARS = 500


def in_a_line(exc: BaseException, with_type: bool = True) -> str:
    """Its type (left out for a message written for people) and its message's first line, cut to LINE_CHARS.

    torch appends C++ stack frames on later lines; the first says what happened.
    """
    first = next((line for line in str(exc).splitlines() if line.strip()), "")
    return (f"{type(exc).__name__}: {first}" if with_type else first).strip()[:LINE_CHARS]
