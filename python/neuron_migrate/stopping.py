"""Stopping a run cleanly: the first Ctrl-C / SIGTERM asks every section to stop at its next
safe point (between requests, steps, shapes), so threads and locks are never interrupted
mid-way; a second one raises KeyboardInterrupt at once."""
import threading

_requested = threading.Event()


class StopRequested(Exception):
    """Raised at a safe point after a stop was requested."""


def requested():
    return _requested.is_set()


def check():
    """Raises StopRequested when a stop was requested (call between units of work)."""
    if _requested.is_set():
        raise StopRequested("stop requested")


def handle_signal(signum, frame):
    """Signal handler (main thread): first signal requests a stop, the second interrupts."""
    if _requested.is_set():
        raise KeyboardInterrupt
    _requested.set()


def reset():
    _requested.clear()
