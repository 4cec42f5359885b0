"""Memory over time: a background thread samples the process's RSS and the device's
allocated bytes every `interval` seconds, tagged with the phase running."""
import threading
import time

import psutil

from . import devices


class MemorySampler:
    """Start/stop from the main thread; `phase` may be set from any thread."""

    def __init__(self, device, interval=0.1):
        self.device, self.interval, self.phase = device, interval, "start"
        self.samples, self._stop = [], threading.Event()
        self._process = psutil.Process()
        self._start = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, name="neuron-migrate-memory", daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self):
        try:
            device_bytes = devices.memory_allocated(self.device)
        except Exception:  # the device may not be initialised yet
            device_bytes = None
        self.samples.append({"t": time.perf_counter() - self._start, "phase": self.phase,
                             "rss_bytes": self._process.memory_info().rss, "device_bytes": device_bytes})

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.sample()
        return self.samples
