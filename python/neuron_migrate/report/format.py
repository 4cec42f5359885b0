"""Number formatting shared by the terminal, Markdown and HTML reports."""


def gib(value):
    return "n/a" if value is None else f"{value / 2**30:.2f} GiB"


def mib(value):
    return "n/a" if value is None else f"{value / 2**20:.1f} MiB"


def count(value):
    if value is None:
        return "n/a"
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.2f}{unit}"
    return str(value)


def ms(value):
    return "n/a" if value is None else f"{value:.1f} ms"


def fixed(value, digits):
    return "n/a" if value is None else f"{value:.{digits}f}"


def fraction(value):
    return "n/a" if value is None else f"{value:.1%}"


def number(value, digits=4):
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def size(value):
    """Bytes in the largest unit that keeps the number >= 1."""
    if value is None:
        return "n/a"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value} B"
